#pragma once
// Learning-rate schedule as Megatron's: linear warmup from 0 over warmup_iters (the first step
// uses lr * 1/warmup), then cosine or linear decay to min_lr at decay_iters, min_lr after.
#include <cstdint>

#include "megatron/config/options.h"

namespace megatron::optim {

using Decay = config::LrDecay;  // optimizer.schedule.decay, parsed by the recipe loader

struct LRSchedule {
  double max_lr = 0, min_lr = 0;
  int64_t warmup_iters = 0, decay_iters = 0;
  Decay decay = Decay::Cosine;
  // lr for the step that completes iteration `step` (1-based: step 1 is the first update).
  double lr(int64_t step) const;
};

}  // namespace megatron::optim
