#include "megatron/optimizer/grad_sync.h"

#include <algorithm>

namespace megatron::optim {

DataParallelGrads::DataParallelGrads(ParamStore& store, parallel::Communicator& dp,
                                     int64_t bucket_elements, bool distributed, BufferRange range)
    : store_(&store), dp_(&dp), distributed_(distributed && dp.size() > 1) {
  MT_CHECK(store.finalized(), "gradient sync built before the parameter store was finalized");
  if (range.size() == 0 && range.begin == 0) range = {0, store.trainable_numel()};
  MT_CHECK(range.begin >= 0 && range.end <= store.trainable_numel() && range.begin <= range.end,
           "gradient sync range [", range.begin, ", ", range.end, ") outside the buffer of ",
           store.buffer_numel());
  const int64_t total = range.size(), n = dp.size();
  MT_CHECK(!distributed_ || total % n == 0, "gradient buffer range of ", total,
           " elements is not padded to a multiple of data-parallel size ", n);
  const int64_t step = std::max<int64_t>((bucket_elements + n - 1) / n * n, n);
  for (int64_t b = 0; b < total; b += step)
    buckets_.push_back({range.begin + b, range.begin + std::min(b + step, total)});
  if (distributed_) {
    for (const BufferRange& b : buckets_) {
      const int64_t shard = b.size() / n;
      owned_.push_back({b.begin + dp.rank() * shard, b.begin + (dp.rank() + 1) * shard});
      shard_scratch_.push_back(Tensor::empty({shard}, DType::F32, store.device()));
      gather_scratch_.push_back(Tensor::empty({shard}, store.model_dtype(), store.device()));
    }
  } else if (total > 0) {
    owned_.push_back(range);
  }
}

DataParallelGrads::~DataParallelGrads() {
  for (auto& w : pending_)
    if (w) w->wait();
}

void DataParallelGrads::begin_last_backward() {
  armed_ = dp_->size() > 1;
  next_bucket_ = 0;
}

void DataParallelGrads::grads_ready_below(int64_t watermark) {
  if (!armed_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].end <= watermark)
    launch(next_bucket_++);
}

void DataParallelGrads::launch(size_t i) {
  Tensor grads = store_->grads().flat_view(buckets_[i].begin, {buckets_[i].size()});
  if (distributed_) {
    pending_.push_back(
        dp_->reduce_scatter_async(grads, shard_scratch_[i], parallel::ReduceOp::Sum));
  } else {
    pending_.push_back(dp_->all_reduce_async(grads, parallel::ReduceOp::Sum));
  }
}

void DataParallelGrads::finish() {
  if (dp_->size() == 1) return;
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  for (auto& w : pending_) w->wait();
  pending_.clear();
  if (distributed_) {
    // The reduced shard lands in scratch (the input bucket must not alias the output).
    for (size_t i = 0; i < buckets_.size(); ++i)
      store_->grads().flat_view(owned_[i].begin, {owned_[i].size()}).copy_from(shard_scratch_[i]);
  }
  next_bucket_ = 0;
  armed_ = false;
}

void DataParallelGrads::gather_params() {
  if (!distributed_) return;
  std::vector<Tensor> outs;
  outs.reserve(buckets_.size());  // async gathers keep pointers to these views
  for (size_t i = 0; i < buckets_.size(); ++i) {
    gather_scratch_[i].copy_from(store_->weights().flat_view(owned_[i].begin, {owned_[i].size()}));
    outs.push_back(store_->weights().flat_view(buckets_[i].begin, {buckets_[i].size()}));
    pending_.push_back(dp_->all_gather_async(gather_scratch_[i], outs.back()));
  }
  for (auto& w : pending_) w->wait();
  pending_.clear();
}

}  // namespace megatron::optim
