#pragma once
// RMSNorm of queries and keys over their whole projections (OLMo-2's q_norm / k_norm) on CUDA,
// step for step kernels/cpu/norm.h's qk_projection_* (read it first): the per-token statistics
// are separate calls so that tensor-parallel ranks can all-reduce them in between.
//
//   qk_projection_sums:          sums [tokens, 2] = sum x^2 (dy null) or sum dy w x (dy given)
//                                over each token's local query, then key, entries
//   qk_projection_norm_forward:  rstd = 1 / sqrt(sums / width + eps), y = x rstd w (value copied)
//   qk_projection_norm_backward: dx = rstd w dy - x rstd^3 dots / width (value copied; dx may be
//                                dy) and dwq, dwk += sum over tokens of dy x rstd, through a
//                                deterministic two-pass reduction (tokens in fixed chunks, then
//                                the chunks in order): no atomics, the same bits every run.
//
// x, y, dy, dx [tokens, groups, q_slots + 2, head_dim] (T); wq [groups * q_slots * head_dim] and
// wk [groups * head_dim] (W: float or T); sums, dots, rstd, dwq, dwk fp32. One warp per token.
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/common/qk_projection.h"

namespace megatron::kernels::cuda {

size_t qk_projection_backward_workspace_bytes(const QkProjection& p);

template <typename T, typename W>
void qk_projection_sums(const T* x, const T* dy, const W* wq, const W* wk, float* sums,
                        const QkProjection& p, cudaStream_t stream);
template <typename T, typename W>
void qk_projection_norm_forward(const T* x, const W* wq, const W* wk, const float* sums, T* y,
                                float* rstd, const QkProjection& p, cudaStream_t stream);
template <typename T, typename W>
void qk_projection_norm_backward(const T* x, const W* wq, const W* wk, const float* rstd,
                                 const float* dots, const T* dy, T* dx, float* dwq, float* dwk,
                                 const QkProjection& p, void* workspace, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
