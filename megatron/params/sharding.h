#pragma once
// How a ParamStore's buffers are cut for data parallelism (the ZeRO stages). The store lays its
// parameters out in one virtual buffer (buffer coordinates: Parameter::offset) cut into pieces;
// data-parallel rank r of a piece's group owns slice r of it. What a rank keeps of each buffer:
//
//   strategy              model weights   fp32 main grads   fp32 masters + Adam moments
//   no_shard              whole           whole             whole
//   optim (ZeRO-1)        whole           whole             owned slices
//   optim_grads (ZeRO-2)  whole           owned slices      owned slices
//   optim_grads_params    owned slices    owned slices      owned slices
//     (ZeRO-3 / FSDP)
//
// The owned slices of all pieces, concatenated in buffer order, are the shard coordinates of the
// sharded buffers. With gradients or weights sharded the pieces are the parameter units
// (ParamStore::begin_unit: a layer, the embeddings, the head), each padded to a multiple of its
// group, so one unit's gradients are reduce-scattered and its weights all-gathered as pieces of
// their own; otherwise they are the buckets of the bucketed data-parallel reduction.
#include <cstdint>

#include "megatron/core/tensor.h"

namespace megatron {

struct Parameter;

struct BufferRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The buffer's regions, each sharded over its own group: dense weights over the data-parallel
// shard group, routed experts' weights (MoE) over expert data parallelism, and frozen weights
// (LoRA's base model; weights only) over the data-parallel shard group again.
enum class BufferRegion : uint8_t { Dense, Expert, Frozen };

struct DataParallelSharding {
  bool optimizer = false;                    // masters and moments (optim and beyond)
  bool grads = false;                        // + main gradients (optim_grads and beyond)
  bool weights = false;                      // + model weights (optim_grads_params)
  int64_t dense_size = 1, dense_rank = 0;    // the dense and frozen regions' shard group
  int64_t expert_size = 1, expert_rank = 0;  // the experts' region's
  // Bucket size (elements) when pieces are buckets (gradients not sharded): large enough for
  // bandwidth, small enough to overlap backward.
  int64_t bucket_elements = int64_t{4} << 20;
  // Optimizer offload (optimizer.offload: cpu): the fp32 masters of this fraction of the owned
  // elements (whole segments, in buffer order) live in page-locked host memory, stepped there
  // (optimizer/offload.h); 0: none.
  double offload_fraction = 0;
  bool per_unit() const { return grads || weights; }
  // Throws when the stages are not nested or a group is malformed.
  void validate() const;
};

// One piece of the buffer: [range) in buffer coordinates, sharded over `shards` ranks of which
// this one owns `owned` (the whole piece when shards == 1), stored from shard_offset on in the
// sharded buffers.
struct ShardPiece {
  BufferRange range, owned;
  BufferRegion region = BufferRegion::Dense;
  int64_t unit = 0;  // the parameter unit (per-unit pieces); -1 for a bucket
  int64_t shards = 1;
  int64_t shard_offset = 0;
};

// The part of one parameter inside an owned slice: its local elements [begin, end), with views of
// where their gradient, fp32 master and model weight live (whole or sharded buffers) and their
// offsets in ParamStore's grads(), masters() and weights() buffers (for host staging).
struct ParamSegment {
  Parameter* param = nullptr;
  int64_t begin = 0, end = 0;
  // Offloaded: master (and the optimizer's moments) in host memory; master_at then indexes
  // ParamStore::host_masters().
  bool offloaded = false;
  int64_t state_offset = 0;  // in per-owned-element optimizer state (Adam moments)
  Tensor grad, master, weight;
  int64_t grad_at = 0, master_at = 0, weight_at = 0;
  int64_t size() const { return end - begin; }
};

}  // namespace megatron
