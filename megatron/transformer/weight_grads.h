#pragma once
// Deferred weight gradients, for the zero-bubble pipeline schedules (pipeline/zero_bubble.h): a
// layer's backward computes its input gradient (B) at once and hands its weight-gradient work to
// run_weight_grads. Without a queue on the micro-batch the work runs there and then (the same
// operations in the same order as a joint backward); with one it waits in the queue until the
// schedule's W action drains it. The deferral lives here, not in the layers.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/transformer/context.h"

namespace megatron {

// The copies queued work reads, reused from step to step: after the first step a deferred
// backward allocates nothing (fresh host memory costs page faults on every micro-batch).
class WeightGradBuffers {
 public:
  // A tensor of t's shape, dtype and device holding t's values.
  Tensor copy_of(const Tensor& t);
  // Copies no longer read (their queue drained) become free for copy_of.
  void give_back(std::vector<Tensor>& used);

 private:
  std::map<std::string, std::vector<Tensor>> free_;  // by shape, dtype and device
};

class WeightGradQueue {
 public:
  using Work = std::function<void()>;
  // buffers (optional, must outlive the queue): where keep() takes its copies from.
  explicit WeightGradQueue(WeightGradBuffers* buffers = nullptr) : buffers_(buffers) {}
  WeightGradQueue(const WeightGradQueue&) = delete;
  WeightGradQueue& operator=(const WeightGradQueue&) = delete;
  ~WeightGradQueue();

  // A copy of t that stays valid until the queue is drained.
  Tensor keep(const Tensor& t);
  void push(Work work) { work_.push_back(std::move(work)); }
  // Runs every queued piece in the order queued (a backward's layer order), then empties.
  void drain();
  bool empty() const { return work_.empty(); }
  size_t size() const { return work_.size(); }

 private:
  WeightGradBuffers* buffers_;
  std::vector<Work> work_;
  std::vector<Tensor> kept_;
};

using WeightGradWork = std::function<void(const std::vector<Tensor>& inputs)>;

// What a queued W reads: copies of the inputs (the caller's buffers, e.g. a recompute workspace,
// a layer's scratch or the next layer's gradient buffer, may be reused before W), or the inputs
// themselves when they are the micro-batch's own activation buffers, which the pipeline runtime
// keeps until the W has run.
enum class WeightGradInputs : uint8_t { Copy, Stable };

// work(inputs) now when mb (or its queue) is null; else queued. kinds: one per input (empty: all
// copied).
void run_weight_grads(const MicroBatchInfo* mb, std::vector<Tensor> inputs, WeightGradWork work,
                      std::vector<WeightGradInputs> kinds = {});
// Stable where mb says the layers' states stay until W (MicroBatchInfo::layer_states_kept).
inline WeightGradInputs state_input(const MicroBatchInfo* mb) {
  return mb && mb->layer_states_kept ? WeightGradInputs::Stable : WeightGradInputs::Copy;
}

}  // namespace megatron
