#pragma once
// Per-head RMSNorm of the queries and keys inside the fused QKV activation (Megatron-Core's
// qk_layernorm, Qwen3's q_norm/k_norm), op for op kernels/cpu/norm.h's qk_rmsnorm_*: x is
// [groups, q_slots + 2, Dh] (each query group's q_slots query heads, its key head, its value
// head); query heads use wq [Dh], the key head wk [Dh], the value head is copied. rstd [groups,
// q_slots + 1] (fp32). Backward writes dx (dx may be dy: each row is read before it is written)
// and accumulates into the fp32 dwq and dwk through a deterministic two-pass reduction (groups
// in fixed chunks, then the chunks in order): no atomics, same bits every run.
//
// T: activations; W: weights, float or T. Math in fp32, one warp per row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace megatron::kernels::cuda {

size_t qk_rmsnorm_backward_workspace_bytes(int64_t groups, int64_t Dh);

template <typename T, typename W>
void qk_rmsnorm_forward(const T* x, const W* wq, const W* wk, T* y, float* rstd, int64_t groups,
                        int64_t q_slots, int64_t Dh, float eps, cudaStream_t stream);
template <typename T, typename W>
void qk_rmsnorm_backward(const T* x, const W* wq, const W* wk, const float* rstd, const T* dy,
                         T* dx, float* dwq, float* dwk, int64_t groups, int64_t q_slots, int64_t Dh,
                         void* workspace, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
