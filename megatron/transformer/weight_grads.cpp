#include "megatron/transformer/weight_grads.h"

namespace megatron {

void WeightGradQueue::drain() {
  // Moved out first: a piece may not queue more work, but the queue is empty either way after.
  std::vector<Work> work = std::move(work_);
  work_.clear();
  for (Work& w : work) w();
}

void run_weight_grads(const MicroBatchInfo* mb, std::vector<Tensor> inputs, WeightGradWork work) {
  if (mb == nullptr || mb->weight_grads == nullptr) return work(inputs);
  std::vector<Tensor> kept;
  kept.reserve(inputs.size());
  for (const Tensor& t : inputs) kept.push_back(t.clone());
  mb->weight_grads->push([kept = std::move(kept), work = std::move(work)] { work(kept); });
}

}  // namespace megatron
