#pragma once
// Per-micro-batch activation storage. A layer's forward fills its context with what backward
// needs; the buffers are reused by the next micro-batch of the same shape, so steady-state
// training allocates nothing.
#include "kernels/common/context_chunks.h"
#include "megatron/core/tensor.h"

namespace megatron {

// (Re)allocates t on `device` unless it already has this shape and dtype there (contents are
// left unspecified). Layers pass the device of their parameters (ParamStore::device()).
inline Tensor& ensure(Tensor& t, const Shape& shape, DType dtype, Device device) {
  if (!t.owns_storage() || !(t.shape() == shape) || t.dtype() != dtype || t.device() != device)
    t = Tensor::empty(shape, dtype, device);
  return t;
}

// Identifies one dropout site; its Philox stream is derived from all of these so masks differ
// per step, layer and site but never depend on the parallel layout.
struct DropoutSite {
  uint64_t seed = 0;
  int64_t iteration = 0;
  int64_t layer = 0;
  int64_t site = 0;
  uint64_t stream() const {
    return (static_cast<uint64_t>(iteration) << 24) ^ (static_cast<uint64_t>(layer) << 8) ^
           static_cast<uint64_t>(site);
  }
};

struct KvCache;         // kv_cache.h
class WeightGradQueue;  // weight_grads.h
namespace pipeline {
class TimelineRecorder;  // megatron/pipeline/timeline.h
}

// Where this micro-batch sits in the global batch (for layout-independent randomness).
struct MicroBatchInfo {
  int64_t iteration = 0;
  int64_t batch_offset = 0;  // global index of its first sample within the global batch
  bool training = true;      // dropout only when training
  // Incremental decoding (inference, no backward): the tokens are positions
  // kv_cache->length.. of sequences whose earlier keys and values the cache holds.
  KvCache* kv_cache = nullptr;
  // Packed documents (SFT): positions int32 [S, B] restarting at 0 in each document (rope and
  // learned position embeddings) and the document of each token int32 [B, S] (attention never
  // crosses documents), on the compute device; null: one document per sequence. The model points
  // them at its micro-batch's tensors (models::MicroBatch::position_ids / segment_ids).
  const Tensor* position_ids = nullptr;
  const Tensor* segment_ids = nullptr;
  // Context parallelism: which global positions this rank's rows are (position_ids then holds
  // them, and segment_ids / key masks cover the whole sequence). Inactive without it.
  kernels::ContextChunks cp = {};
  // A recorded timeline (logging.timeline) and this micro-batch's index in the step: the
  // context-parallel exchanges are recorded there. Null: none.
  pipeline::TimelineRecorder* timeline = nullptr;
  int microbatch = 0;
  // Zero-bubble schedules: where the backward queues its weight gradients (null: computed in
  // the backward).
  WeightGradQueue* weight_grads = nullptr;
  // Set by a block's backward when its layers' per-micro-batch states (not a recompute
  // workspace) hold what they computed: the pipeline keeps those until the micro-batch's W, so
  // queued weight gradients may read them in place instead of copying.
  bool layer_states_kept = false;
};

}  // namespace megatron
