#pragma once
// Naive reference of kernels/cpu/norm.h (double accumulation, one pass per formula term).
#include <cstdint>

#include "kernels/common/qk_projection.h"

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

// Whole-projection q/k RMSNorm of one process (every group on it: p.q_width and p.k_width are
// this x's): each token's query entries gathered into one row, normalized by rmsnorm_forward /
// backward above with the gathered weights, and scattered back; likewise its key entries; the
// value heads copied. rstd: [tokens, 2].
void qk_projection_norm_forward(const float* x, const float* wq, const float* wk, float* y,
                                float* rstd, const QkProjection& p);
void qk_projection_norm_backward(const float* x, const float* wq, const float* wk,
                                 const float* rstd, const float* dy, float* dx, float* dwq,
                                 float* dwk, const QkProjection& p);

}  // namespace megatron::kernels::ref
