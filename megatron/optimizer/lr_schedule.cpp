#include "megatron/optimizer/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace megatron::optim {

double LRSchedule::lr(int64_t update) const {
  const int64_t step = std::max<int64_t>(update - 1, 0);  // updates completed before this one
  if (warmup_iters > 0 && step <= warmup_iters)
    return max_lr * static_cast<double>(step) / static_cast<double>(warmup_iters);
  if (decay == Decay::Constant) return max_lr;
  if (step >= decay_iters) return min_lr;
  const double ratio = static_cast<double>(step - warmup_iters) /
                       static_cast<double>(std::max<int64_t>(decay_iters - warmup_iters, 1));
  const double coeff =
      decay == Decay::Cosine ? 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0) : 1.0 - ratio;
  return min_lr + coeff * (max_lr - min_lr);
}

}  // namespace megatron::optim
