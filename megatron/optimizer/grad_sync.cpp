#include "megatron/optimizer/grad_sync.h"

#include <algorithm>
#include <utility>

#include "megatron/optimizer/topk_compression.h"

namespace megatron::optim {

DataParallelGrads::DataParallelGrads(ParamStore& store, BufferRegion region,
                                     parallel::Communicator& group,
                                     parallel::Communicator* replicas)
    : store_(&store),
      group_(&group),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      distributed_(store.sharding().optimizer && group.size() > 1) {
  MT_CHECK(store.finalized(), "gradient sync built before the parameter store was finalized");
  for (const ShardPiece& p : store.pieces()) {
    if (p.region != region) continue;
    MT_CHECK(p.shards == (distributed_ ? group.size() : 1), "buffer piece [", p.range.begin, ", ",
             p.range.end, ") is sharded ", p.shards, " ways but group '", group.name(), "' has ",
             group.size(), " ranks");
    buckets_.push_back(p.range);
    owned_.push_back(p.owned);
  }
  MT_CHECK(!replicas_ || distributed_, "hybrid sharding without a sharded optimizer");
  if (distributed_) shard_scratch_.resize(buckets_.size());
}

DataParallelGrads::~DataParallelGrads() {
  for (auto& w : pending_)
    if (w) w->wait();
}

void DataParallelGrads::begin_last_backward() {
  armed_ = group_->size() > 1 || replicas_;
  next_bucket_ = 0;
}

void DataParallelGrads::grads_ready_below(int64_t watermark) {
  if (!armed_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].end <= watermark)
    launch(next_bucket_++);
}

void DataParallelGrads::compress_topk(double ratio) {
  MT_CHECK(!distributed_ && !replicas_, "top-k gradient compression needs no_shard");
  MT_INPUT_CHECK(store_->device() == Device::CPU,
                 "parallel.grad_compression topk runs on the CPU backend only so far");
  topk_ratio_ = topk_density_ = ratio;
  residual_.clear();
  for (const BufferRange& b : buckets_) residual_.push_back(Tensor::zeros({b.size()}, DType::F32));
  packed_.assign(buckets_.size(), Tensor());
  gathered_.assign(buckets_.size(), Tensor());
  sparse_.assign(buckets_.size(), 0);
}

// Bucket i leaves as this rank's sparse set (all-gathered), or whole where the set would carry
// half of the bucket or more (then the residual goes with it and restarts from zero).
void DataParallelGrads::launch_topk(size_t i, Tensor& grads) {
  const int64_t n = grads.numel(), k = topk_keep(n, topk_density_);
  float* g = grads.data<float>();
  float* r = residual_[i].data<float>();
  sparse_[i] = 2 * k < n;
  if (!sparse_[i]) {
    for (int64_t j = 0; j < n; ++j) g[j] += r[j], r[j] = 0.0f;
    bytes_ += static_cast<int64_t>(grads.nbytes());
    pending_.push_back(group_->all_reduce_async(grads, parallel::ReduceOp::Sum));
    return;
  }
  if (packed_[i].numel() != 2 * k) {
    packed_[i] = Tensor::empty({2 * k}, DType::I32);
    gathered_[i] = Tensor::empty({group_->size() * 2 * k}, DType::I32);
  }
  topk_compress(g, r, n, k, packed_[i].data<int32_t>());
  bytes_ += static_cast<int64_t>(packed_[i].nbytes());
  pending_.push_back(group_->all_gather_async(packed_[i], gathered_[i]));
}

void DataParallelGrads::launch(size_t i) {
  Tensor grads = store_->grads().flat_view(buckets_[i].begin, {buckets_[i].size()});
  if (topk_ratio_ > 0) return launch_topk(i, grads);
  bytes_ += static_cast<int64_t>(grads.nbytes());
  if (distributed_) {
    // Reduced into scratch: the input bucket must not alias the output.
    Tensor& shard = shard_scratch_[i];
    if (!shard.defined()) shard = Tensor::empty({owned_[i].size()}, DType::F32, store_->device());
    pending_.push_back(group_->reduce_scatter_async(grads, shard, parallel::ReduceOp::Sum));
  } else {
    pending_.push_back(group_->all_reduce_async(grads, parallel::ReduceOp::Sum));
  }
}

void DataParallelGrads::finish() {
  if (group_->size() == 1 && !replicas_) return;
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  for (auto& w : pending_) w->wait();
  pending_.clear();
  if (topk_ratio_ > 0)
    for (size_t i = 0; i < buckets_.size(); ++i)
      if (sparse_[i])
        topk_decompress(gathered_[i].data<int32_t>(), group_->size(), packed_[i].numel() / 2,
                        store_->grads().data<float>() + buckets_[i].begin, buckets_[i].size());
  if (distributed_) {
    for (size_t i = 0; i < buckets_.size(); ++i) {
      Tensor owned = store_->grads().flat_view(owned_[i].begin, {owned_[i].size()});
      owned.copy_from(shard_scratch_[i]);
      if (replicas_) {
        bytes_ += static_cast<int64_t>(owned.nbytes());
        pending_.push_back(replicas_->all_reduce_async(owned, parallel::ReduceOp::Sum));
      }
    }
    for (auto& w : pending_) w->wait();
    pending_.clear();
  }
  next_bucket_ = 0;
  armed_ = false;
}

void DataParallelGrads::gather_params() {
  if (!distributed_ || store_->sharding().weights) return;
  std::vector<Tensor> ins, outs;
  ins.reserve(buckets_.size());  // async gathers keep pointers to these views
  outs.reserve(buckets_.size());
  for (size_t i = 0; i < buckets_.size(); ++i) {
    // In place: this rank's slice is its own chunk of the bucket.
    ins.push_back(store_->weights().flat_view(owned_[i].begin, {owned_[i].size()}));
    outs.push_back(store_->weights().flat_view(buckets_[i].begin, {buckets_[i].size()}));
    bytes_ += static_cast<int64_t>(outs.back().nbytes());
    pending_.push_back(group_->all_gather_async(ins.back(), outs.back()));
  }
  for (auto& w : pending_) w->wait();
  pending_.clear();
}

int64_t DataParallelGrads::take_bytes() { return std::exchange(bytes_, 0); }

}  // namespace megatron::optim
