#pragma once
// Data-parallel gradient reduction over the ParamStore's contiguous fp32 gradient buffer.
//
// The buffer is cut into buckets in backward order. During the last micro-batch's backward the
// model reports a watermark (every gradient below it is final); each bucket whose end falls
// below the watermark starts its reduction at once, overlapping the rest of backward.
//
// Gradients are SUMMED over data parallel: the loss is already normalised by the token count
// of the whole global batch (see Trainer), so the sum is the gradient of the global mean loss,
// exactly as averaging per-rank means would be for equal token counts.
//
// With the distributed optimizer (ZeRO-1) each bucket is reduce-scattered instead: data-parallel
// rank r owns shard r of every bucket (buckets are padded to a multiple of dp), steps only the
// parameters in its shards, then all-gathers the updated parameters.
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron::optim {

struct BufferRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

class DataParallelGrads {
 public:
  // store must be finalized with pad_multiple = dp size (distributed) so buckets split evenly.
  // range: the part of the buffer this instance reduces (the whole buffer when empty; MoE models
  // reduce the experts' region, ParamStore::expert_begin() on, over the expert-data-parallel
  // group with a second instance).
  DataParallelGrads(ParamStore& store, parallel::Communicator& dp, int64_t bucket_elements,
                    bool distributed, BufferRange range = {});
  ~DataParallelGrads();

  // Call before the backward of the step's last micro-batch: from then on reported watermarks
  // launch bucket reductions.
  void begin_last_backward();
  void grads_ready_below(int64_t watermark);
  // Launches the remaining buckets and waits for all of them.
  void finish();
  // Distributed optimizer: all-gather every bucket's model-weight shards (the model dtype: bf16
  // halves the bytes) after the step refreshed this rank's own.
  void gather_params();

  const std::vector<BufferRange>& buckets() const { return buckets_; }
  // The buffer ranges whose reduced gradients this rank holds and whose parameters it steps.
  const std::vector<BufferRange>& owned() const { return owned_; }
  bool distributed() const { return distributed_; }

 private:
  void launch(size_t bucket);

  ParamStore* store_;
  parallel::Communicator* dp_;
  bool distributed_;
  std::vector<BufferRange> buckets_, owned_;
  std::vector<std::unique_ptr<parallel::Work>> pending_;
  std::vector<Tensor> shard_scratch_;   // fp32 gradient shards (reduce-scatter output)
  std::vector<Tensor> gather_scratch_;  // model-dtype weight shards (all-gather input)
  size_t next_bucket_ = 0;
  bool armed_ = false;
};

}  // namespace megatron::optim
