#pragma once
// LayerNorm and RMSNorm over the last dim of x[rows, D]. Forward saves per-row statistics
// for backward. Backward writes dx and accumulates (+=) into dweight/dbias.
#include <cstdint>

#include "kernels/common/qk_projection.h"

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

// Per-head RMSNorm of the queries and keys inside a fused QKV activation (Megatron-Core's
// qk_layernorm; Qwen3's q_norm/k_norm): x is [groups, q_slots + 2, Dh] (each query group's
// q_slots query heads, its key head, its value head). Query heads are normalized with wq [Dh],
// the key head with wk [Dh], the value head is copied. rstd: [groups, q_slots + 1]. Backward
// writes dx (value rows: dy) and accumulates into dwq and dwk, summing rows in a fixed order.
template <typename T>
void qk_rmsnorm_forward(const T* x, const float* wq, const float* wk, T* y, float* rstd,
                        int64_t groups, int64_t q_slots, int64_t Dh, float eps);
template <typename T>
void qk_rmsnorm_backward(const T* x, const float* wq, const float* wk, const float* rstd,
                         const T* dy, T* dx, float* dwq, float* dwk, int64_t groups,
                         int64_t q_slots, int64_t Dh);

// RMSNorm of queries and keys over their whole projections (OLMo-2's q_norm / k_norm), in
// three steps so that tensor-parallel ranks can add their partial sums between them
// (kernels/common/qk_projection.h; widths: QkProjection::q_width, k_width):
//   forward:  sums = qk_projection_sums(x, dy null)   [tokens, 2]: sum x^2 over q, over k
//             (+ tensor-parallel sum)
//             qk_projection_norm_forward: rstd = 1 / sqrt(sums / width + eps), y = (x rstd) w
//   backward: dots = qk_projection_sums(x, dy, w)     [tokens, 2]: sum dy w x over q, over k
//             (+ tensor-parallel sum)
//             qk_projection_norm_backward: dx = rstd w dy - x rstd^3 dots / width and
//             dw += dy x rstd (dx may alias dy).
// wq: this rank's [groups, q_slots, Dh] query weights, wk its [groups, Dh] key weights.
template <typename T>
void qk_projection_sums(const T* x, const T* dy, const float* wq, const float* wk, float* sums,
                        const QkProjection& p);
template <typename T>
void qk_projection_norm_forward(const T* x, const float* wq, const float* wk, const float* sums,
                                T* y, float* rstd, const QkProjection& p);
template <typename T>
void qk_projection_norm_backward(const T* x, const float* wq, const float* wk, const float* rstd,
                                 const float* dots, const T* dy, T* dx, float* dwq, float* dwk,
                                 const QkProjection& p);

}  // namespace megatron::kernels::cpu
