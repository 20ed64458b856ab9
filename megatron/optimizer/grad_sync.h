#pragma once
// Data-parallel gradient reduction over the ParamStore's whole fp32 gradient buffer (strategies
// no_shard and optim; sharded gradients are reduced per unit by distributed/fully_sharded.h).
//
// The store cuts each region of the buffer into buckets in backward order (ShardPiece). During
// the last micro-batch's backward the model reports a watermark (every gradient below it is
// final); each bucket whose end falls below the watermark starts its reduction at once,
// overlapping the rest of backward.
//
// Gradients are SUMMED over data parallel: the loss is already normalised by the token count
// of the whole global batch (see Trainer), so the sum is the gradient of the global mean loss,
// exactly as averaging per-rank means would be for equal token counts.
//
// With the distributed optimizer (ZeRO-1) each bucket is reduce-scattered instead: rank r of the
// shard group owns slice r of every bucket, steps only the parameters in its slices, then
// all-gathers the updated weights. Hybrid sharding adds an all-reduce of the owned slices over
// the replica group (the same shard of the other instances).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron::optim {

using megatron::BufferRange;

class DataParallelGrads {
 public:
  // The store's pieces of `region`, reduced over `group` (sharded over it when the store's
  // optimizer is sharded); replicas: hybrid sharding's replica group, or null.
  DataParallelGrads(ParamStore& store, BufferRegion region, parallel::Communicator& group,
                    parallel::Communicator* replicas = nullptr);
  ~DataParallelGrads();

  // Call before the backward of the step's last micro-batch: from then on reported watermarks
  // launch bucket reductions.
  void begin_last_backward();
  void grads_ready_below(int64_t watermark);
  // Launches the remaining buckets and waits for all of them.
  void finish();
  // Sharded optimizer: all-gather every piece's model-weight slices (the model dtype: bf16
  // halves the bytes) after the step refreshed this rank's own (in place).
  void gather_params();

  const std::vector<BufferRange>& buckets() const { return buckets_; }
  // The buffer ranges whose reduced gradients this rank holds and whose parameters it steps.
  const std::vector<BufferRange>& owned() const { return owned_; }
  bool distributed() const { return distributed_; }
  // Bytes this rank handed to collectives since the last call (payload, per step).
  int64_t take_bytes();
  // parallel.grad_compression topk (no_shard only; optimizer/topk_compression.h): each bucket
  // leaves as its topk_ratio largest entries, the rest kept in residuals() for the next step.
  void compress_topk(double ratio);
  // The share of entries the next reduction sends (the warm-up's; at most 1): a bucket whose
  // sparse set would carry half of its entries or more goes whole, its residual with it.
  void set_topk_density(double density) { topk_density_ = std::min(1.0, density); }
  // The error-feedback residual of each bucket (fp32, this rank's own; empty without topk).
  const std::vector<Tensor>& residuals() const { return residual_; }

 private:
  void launch(size_t bucket);
  void launch_topk(size_t bucket, Tensor& grads);

  ParamStore* store_;
  parallel::Communicator *group_, *replicas_;
  bool distributed_;
  std::vector<BufferRange> buckets_, owned_;
  std::vector<std::unique_ptr<parallel::Work>> pending_;
  std::vector<Tensor> shard_scratch_;  // fp32 gradient slices (reduce-scatter output)
  double topk_ratio_ = 0;              // 0: no compression
  double topk_density_ = 0;            // this step's share (topk_ratio_ after the warm-up)
  std::vector<uint8_t> sparse_;        // per bucket: sent as a sparse set this step
  std::vector<Tensor> residual_, packed_, gathered_;  // per bucket (topk)
  size_t next_bucket_ = 0;
  bool armed_ = false;
  int64_t bytes_ = 0;
};

}  // namespace megatron::optim
