#pragma once
// Deferred weight gradients, for the zero-bubble pipeline schedules (pipeline/zero_bubble.h): a
// layer's backward computes its input gradient (B) at once and hands its weight-gradient work to
// run_weight_grads. Without a queue on the micro-batch the work runs there and then (the same
// operations in the same order as a joint backward); with one it waits in the queue until the
// schedule's W action drains it. The deferral lives here, not in the layers.
#include <functional>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/transformer/context.h"

namespace megatron {

class WeightGradQueue {
 public:
  using Work = std::function<void()>;
  void push(Work work) { work_.push_back(std::move(work)); }
  // Runs every queued piece in the order queued (a backward's layer order), then empties.
  void drain();
  bool empty() const { return work_.empty(); }
  size_t size() const { return work_.size(); }

 private:
  std::vector<Work> work_;
};

using WeightGradWork = std::function<void(const std::vector<Tensor>& inputs)>;

// work(inputs) now when mb (or its queue) is null; else queued with copies of `inputs` (the
// caller's buffers, e.g. a recompute workspace or a layer's scratch, may be reused before W).
void run_weight_grads(const MicroBatchInfo* mb, std::vector<Tensor> inputs, WeightGradWork work);

}  // namespace megatron
