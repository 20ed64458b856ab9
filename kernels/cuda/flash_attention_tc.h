#pragma once
// The tensor-core path of our flash attention (flash_attention.h dispatches to it): bf16 or
// fp16, head dim a multiple of 16 up to 128, no dropout; any causal/window/key-mask/segment
// masking, soft-capped scores (Gemma 2). Same semantics and the same saved row log-sum-exp as the
// SIMT kernels (which keep every other case: fp32, dropout, odd head dims), with each tile product
// on the tensor cores (WMMA 16x16x16, fp32 accumulation): the scores Q K^T, P V, and in backward dP
// = dO V^T, dV = P^T dO, dK = dS^T Q, dQ = dS K, P and dS rounded to the input dtype as
// FlashAttention-2 does. Tiles of 64 queries x 64 keys, four warps of 16 rows; the softmax and
// masks run on fp32 tiles in shared memory. Backward is two deterministic kernels like the SIMT one
// (dK/dV per key tile over the group's heads, then dQ per query tile), both recomputing P.
#include <cuda_runtime.h>

#include "kernels/common/attention_shape.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cuda::flash_tc {

// Whether this path takes the problem (else the SIMT kernels do).
bool runs(const AttentionShape& shape, const AttentionOptions& opt, DType dtype);

// out [S, B, H, Dh], lse [B, H, S] (fp32), as flash_attention_forward.
template <typename T>
void forward(const AttentionShape& shape, const AttentionOptions& opt, const T* qkv, T* out,
             float* lse, cudaStream_t stream);
// dqkv from qkv, lse, dout and D = rowsum(dout * out) [B, H, S]; writes every element.
template <typename T>
void backward(const AttentionShape& shape, const AttentionOptions& opt, const T* qkv,
              const float* lse, const T* dout, const float* D, T* dqkv, cudaStream_t stream);

}  // namespace megatron::kernels::cuda::flash_tc
