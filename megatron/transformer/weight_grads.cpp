#include "megatron/transformer/weight_grads.h"

#include "megatron/core/error.h"

namespace megatron {

namespace {
std::string key_of(const Tensor& t) {
  return concat(t.shape().str(), "/", static_cast<int>(t.dtype()), "/",
                static_cast<int>(t.device()));
}
}  // namespace

Tensor WeightGradBuffers::copy_of(const Tensor& t) {
  std::vector<Tensor>& free = free_[key_of(t)];
  Tensor out;
  if (free.empty()) {
    out = Tensor::empty(t.shape(), t.dtype(), t.device());
  } else {
    out = std::move(free.back());
    free.pop_back();
  }
  out.copy_from(t);
  return out;
}

void WeightGradBuffers::give_back(std::vector<Tensor>& used) {
  for (Tensor& t : used) free_[key_of(t)].push_back(std::move(t));
  used.clear();
}

WeightGradQueue::~WeightGradQueue() {
  work_.clear();  // the closures' handles first: the buffers then hold the only ones
  if (buffers_) buffers_->give_back(kept_);
}

Tensor WeightGradQueue::keep(const Tensor& t) {
  Tensor copy = buffers_ ? buffers_->copy_of(t) : t.clone();
  if (buffers_) kept_.push_back(copy);
  return copy;
}

void WeightGradQueue::drain() {
  std::vector<Work> work = std::move(work_);
  work_.clear();
  for (Work& w : work) w();
  work.clear();
  if (buffers_) buffers_->give_back(kept_);
}

void run_weight_grads(const MicroBatchInfo* mb, std::vector<Tensor> inputs, WeightGradWork work,
                      std::vector<WeightGradInputs> kinds) {
  if (mb == nullptr || mb->weight_grads == nullptr) return work(inputs);
  MT_CHECK(kinds.empty() || kinds.size() == inputs.size(), "run_weight_grads: ", kinds.size(),
           " input kinds for ", inputs.size(), " inputs");
  WeightGradQueue& queue = *mb->weight_grads;
  std::vector<Tensor> kept;
  kept.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool stable = !kinds.empty() && kinds[i] == WeightGradInputs::Stable;
    kept.push_back(stable ? inputs[i] : queue.keep(inputs[i]));
  }
  queue.push([kept = std::move(kept), work = std::move(work)] { work(kept); });
}

}  // namespace megatron
