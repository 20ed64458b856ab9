#pragma once
// LayerNorm and RMSNorm over the last dim of x[rows, D]. Forward saves per-row statistics
// for backward. Backward writes dx and accumulates (+=) into dweight/dbias.
#include <cstdint>

namespace megatron::kernels::cpu {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t D, float eps);
void layernorm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dweight, float* dbias, int64_t rows,
                        int64_t D);

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                     int64_t D, float eps);
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                      float* dx, float* dweight, int64_t rows, int64_t D);

}  // namespace megatron::kernels::cpu
