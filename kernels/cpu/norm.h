#pragma once
// LayerNorm and RMSNorm over the last dim of x[rows, D]. Forward saves per-row statistics
// for backward. Backward writes dx and accumulates (+=) into dweight/dbias.
#include <cstdint>

namespace megatron::kernels::cpu {

// T: the storage type of x, y, dy and dx, float or bf16_t (instantiated in norm.cpp; bf16 is
// widened in registers, fp32 math, one rounding per output). Weights, statistics and the
// weight gradients are fp32.
template <typename T>
void layernorm_forward(const T* x, const float* weight, const float* bias, T* y, float* mean,
                       float* rstd, int64_t rows, int64_t D, float eps);
template <typename T>
void layernorm_backward(const T* x, const float* weight, const float* mean, const float* rstd,
                        const T* dy, T* dx, float* dweight, float* dbias, int64_t rows, int64_t D);

template <typename T>
void rmsnorm_forward(const T* x, const float* weight, T* y, float* rstd, int64_t rows, int64_t D,
                     float eps);
template <typename T>
void rmsnorm_backward(const T* x, const float* weight, const float* rstd, const T* dy, T* dx,
                      float* dweight, int64_t rows, int64_t D);

}  // namespace megatron::kernels::cpu
