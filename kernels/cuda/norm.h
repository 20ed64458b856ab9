#pragma once
// LayerNorm and RMSNorm over the last dim of x[rows, D], op for op kernels/cpu/norm.h. Forward
// saves per-row statistics (fp32 mean/rstd) for backward; backward writes dx and accumulates
// (+=) into the fp32 dweight/dbias.
//
// T: activations (x, y, dy, dx); W: weight/bias. Instantiated for (T, W) = (float, float),
// (bf16, bf16), (bf16, float), (f16, f16), (f16, float). Statistics and math are fp32.
// Forward and dx: one warp per row. Weight/bias grads: a deterministic two-pass column
// reduction (fixed row chunks in order, then the chunk partials in order) through a workspace of
// norm_backward_workspace_bytes(rows, D) bytes: no atomics, same bits every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace megatron::kernels::cuda {

size_t norm_backward_workspace_bytes(int64_t rows, int64_t D);

template <typename T, typename W>
void layernorm_forward(const T* x, const W* weight, const W* bias, T* y, float* mean, float* rstd,
                       int64_t rows, int64_t D, float eps, cudaStream_t stream);
template <typename T, typename W>
void layernorm_backward(const T* x, const W* weight, const float* mean, const float* rstd,
                        const T* dy, T* dx, float* dweight, float* dbias, int64_t rows, int64_t D,
                        void* workspace, cudaStream_t stream);

template <typename T, typename W>
void rmsnorm_forward(const T* x, const W* weight, T* y, float* rstd, int64_t rows, int64_t D,
                     float eps, cudaStream_t stream);
template <typename T, typename W>
void rmsnorm_backward(const T* x, const W* weight, const float* rstd, const T* dy, T* dx,
                      float* dweight, int64_t rows, int64_t D, void* workspace,
                      cudaStream_t stream);

}  // namespace megatron::kernels::cuda
