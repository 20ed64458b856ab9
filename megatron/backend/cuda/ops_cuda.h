#pragma once
// The CUDA backend of the ops (kernels/common/device_ops.h): megatron/backend/ops.h hands it
// the calls whose tensors are on Device::CUDA after its device and shape checks (call ops::
// rather than these). Each checks dtypes, picks the kernels/cuda instantiation with one
// runtime -> template switch and queues it on the current stream (runtime.h); workspaces come
// from the caching allocator on that stream. CUDA-free header.
//
// Dtypes (T: fp32, bf16 or fp16, one per call; "+=" marks accumulated fp32 gradients):
//   linear_forward          x, w, b, y: T (fp32 GEMMs run in full fp32, no TF32)
//   linear_backward         x, w, dy, dx: T; dw: T or fp32 (+=); db: fp32 (+=)
//   layernorm/rmsnorm fwd   x, y: T; w, b: T or fp32; mean, rstd: fp32
//   layernorm/rmsnorm bwd   x, dy, dx: T; w: T or fp32; mean, rstd: fp32; dw, db: fp32 (+=)
//   gelu, swiglu, tanh      T
//   embedding_forward       ids: int32; table, out: T
//   embedding_backward      ids: int32; dout: T; dtable: fp32 (+=)
//   attention_forward       qkv, out: T; probs: fp32; opt.key_mask: device memory (unfused
//                           cuBLASLt path, kernels/cuda/attention.h)
//   attention_backward      qkv, dout, dqkv: T; probs: fp32
//   flash_attention_*       qkv, out, dout, dqkv: T; lse: fp32 (own tiled kernels,
//                           kernels/cuda/flash_attention.h)
//   kv_cache_attention      qkv, keys, values, out: T (fp32 math; kernels/cuda/kv_attention.h)
//   rope, dropout           T
//   cross_entropy_forward   logits: T; targets: int32; loss, lse: fp32
//   cross_entropy_backward  logits, dlogits: T; targets: int32; lse, dloss: fp32
//   cross_entropy pieces    logits: T; targets: int32; row_max, sum_exp, target_logit, loss,
//                           lse: fp32
//   gather/scatter_rows     src, out: any one dtype; index: int32 (out of range counts as -1)
//   moe_combine             rows: T; index: int32; gates: fp32; out: T or fp32
//   moe_combine_backward    rows, dy, d_rows: T; gates, d_gates: fp32
//   add, add_bias, scale    T
//   add_inplace             acc and x: T, or acc fp32 with x bf16/fp16
//   cast                    src, dst: any of fp32, bf16, fp16
//   adamw_step              fp32
//   sum_squares             T (double accumulation; blocks the host until the result is read)
// Differences from the CPU kernels (a kernel cannot throw): negative embedding ids and
// out-of-vocabulary cross-entropy targets are treated as belonging to another vocabulary shard
// instead of raising an error (kernels/cuda/embedding.h, cross_entropy.h); a row index of the
// MoE ops outside the rows counts as -1, and a scatter naming a row twice is not detected
// (kernels/cuda/moe_rows.h).
#include <cstdint>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "kernels/common/device_ops.h"
#include "kernels/common/dropout_rows.h"
#include "kernels/common/numeric.h"
#include "kernels/common/vocab_slice.h"
#include "megatron/core/tensor.h"

namespace megatron::ops::cuda_backend {

class CudaOps final : public DeviceOps {
 public:
  Device device() const override { return Device::CUDA; }
  MEGATRON_DEVICE_OPS_OVERRIDES
};

}  // namespace megatron::ops::cuda_backend
