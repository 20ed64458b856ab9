#pragma once
// Naive reference of kernels/cpu/norm.h (double accumulation, one pass per formula term).
#include <cstdint>

namespace megatron::kernels::ref {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t D, float eps);
void layernorm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dweight, float* dbias, int64_t rows,
                        int64_t D);
void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                     int64_t D, float eps);
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                      float* dx, float* dweight, int64_t rows, int64_t D);

// Per-head q/k RMSNorm over x [groups, q_slots + 2, Dh] (kernels/cpu/norm.h): each query and
// key row through rmsnorm_forward/backward above, the value rows copied.
void qk_rmsnorm_forward(const float* x, const float* wq, const float* wk, float* y, float* rstd,
                        int64_t groups, int64_t q_slots, int64_t Dh, float eps);
void qk_rmsnorm_backward(const float* x, const float* wq, const float* wk, const float* rstd,
                         const float* dy, float* dx, float* dwq, float* dwk, int64_t groups,
                         int64_t q_slots, int64_t Dh);

}  // namespace megatron::kernels::ref
