#pragma once
// Learning-rate schedule as Megatron's OptimizerParamScheduler: linear warmup from 0 over
// warmup_iters, then cosine or linear decay to min_lr at decay_iters, min_lr after; the lr of an
// update is the schedule at the number of updates completed before it (Megatron steps its
// scheduler after each update, starting from 0), so with warmup the first update has lr 0 and a
// run continued from a Megatron-LM checkpoint follows Megatron's learning rates exactly.
#include <cstdint>

#include "megatron/config/options.h"

namespace megatron::optim {

using Decay = config::LrDecay;  // optimizer.schedule.decay, parsed by the recipe loader

struct LRSchedule {
  double max_lr = 0, min_lr = 0;
  int64_t warmup_iters = 0, decay_iters = 0;
  Decay decay = Decay::Cosine;
  // lr for update `step` (1-based: step 1 is the first update, at schedule position 0).
  double lr(int64_t step) const;
};

}  // namespace megatron::optim
