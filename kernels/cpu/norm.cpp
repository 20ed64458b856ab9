#include "kernels/cpu/norm.h"

#include <cmath>

#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr int64_t kColBlock = 64;

// dweight[j] += sum_r dy[r,j] * xhat[r,j] (and dbias[j] += sum_r dy[r,j] when dbias), with
// xhat = (x - mean[r]) * rstd[r] (mean null for RMSNorm). Each thread owns whole column blocks
// and walks the rows in order, so the sums do not depend on the thread count.
// Rows r of x and dy start at r * row_stride, their statistics at r * stat_stride.
template <typename T>
void norm_param_grads(const T* x, const float* mean, const float* rstd, const T* dy, float* dweight,
                      float* dbias, int64_t rows, int64_t D, int64_t row_stride,
                      int64_t stat_stride) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t j0 = 0; j0 < D; j0 += kColBlock) {
    const int64_t w = j0 + kColBlock < D ? kColBlock : D - j0;
    float acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * row_stride + j0;
      const T* dyr = dy + r * row_stride + j0;
      const float m = mean ? mean[r * stat_stride] : 0.0f, s = rstd[r * stat_stride];
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        const float g = to_f32(dyr[j]);
        acc_w[j] += g * ((to_f32(xr[j]) - m) * s);
        acc_b[j] += g;
      }
    }
    for (int64_t j = 0; j < w; ++j) dweight[j0 + j] += acc_w[j];
    if (dbias)
      for (int64_t j = 0; j < w; ++j) dbias[j0 + j] += acc_b[j];
  }
}

// One row of RMSNorm: y = x * rstd * w; returns rstd.
template <typename T>
inline float rms_row_forward(const T* xr, const float* weight, T* yr, int64_t D, float eps) {
  float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < D; ++j) sq += to_f32(xr[j]) * to_f32(xr[j]);
  const float rs = 1.0f / std::sqrt(sq / float(D) + eps);
#pragma omp simd
  for (int64_t j = 0; j < D; ++j) yr[j] = from_f32<T>(to_f32(xr[j]) * rs * weight[j]);
  return rs;
}

// One row's input gradient: dx = rs * (dy * w - xhat * mean(dy * w * xhat)).
template <typename T>
inline void rms_row_backward(const T* xr, const float* weight, float rs, const T* dyr, T* dxr,
                             int64_t D) {
  float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
  for (int64_t j = 0; j < D; ++j) sum_gx += to_f32(dyr[j]) * weight[j] * (to_f32(xr[j]) * rs);
  const float b = sum_gx / float(D);
#pragma omp simd
  for (int64_t j = 0; j < D; ++j)
    dxr[j] = from_f32<T>(rs * (to_f32(dyr[j]) * weight[j] - to_f32(xr[j]) * rs * b));
}

}  // namespace

template <typename T>
void layernorm_forward(const T* x, const float* weight, const float* bias, T* y, float* mean,
                       float* rstd, int64_t rows, int64_t D, float eps) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < D; ++j) sum += to_f32(xr[j]);
    const float mu = sum / float(D);
    float sq = 0.0f;  // two passes: no cancellation when |mean| >> std
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < D; ++j) sq += (to_f32(xr[j]) - mu) * (to_f32(xr[j]) - mu);
    const float rs = 1.0f / std::sqrt(sq / float(D) + eps);
#pragma omp simd
    for (int64_t j = 0; j < D; ++j)
      yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * rs * weight[j] + bias[j]);
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <typename T>
void layernorm_backward(const T* x, const float* weight, const float* mean, const float* rstd,
                        const T* dy, T* dx, float* dweight, float* dbias, int64_t rows, int64_t D) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    const T* dyr = dy + r * D;
    T* dxr = dx + r * D;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0.0f, sum_gx = 0.0f;  // g = dy * weight
#pragma omp simd reduction(+ : sum_g, sum_gx)
    for (int64_t j = 0; j < D; ++j) {
      const float g = to_f32(dyr[j]) * weight[j];
      sum_g += g;
      sum_gx += g * ((to_f32(xr[j]) - mu) * rs);
    }
    const float a = sum_g / float(D), b = sum_gx / float(D);
#pragma omp simd
    for (int64_t j = 0; j < D; ++j)
      dxr[j] = from_f32<T>(rs * (to_f32(dyr[j]) * weight[j] - a - (to_f32(xr[j]) - mu) * rs * b));
  }
  norm_param_grads(x, mean, rstd, dy, dweight, dbias, rows, D, D, 1);
}

template <typename T>
void rmsnorm_forward(const T* x, const float* weight, T* y, float* rstd, int64_t rows, int64_t D,
                     float eps) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    rstd[r] = rms_row_forward(x + r * D, weight, y + r * D, D, eps);
}

template <typename T>
void rmsnorm_backward(const T* x, const float* weight, const float* rstd, const T* dy, T* dx,
                      float* dweight, int64_t rows, int64_t D) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r)
    rms_row_backward(x + r * D, weight, rstd[r], dy + r * D, dx + r * D, D);
  norm_param_grads(x, nullptr, rstd, dy, dweight, nullptr, rows, D, D, 1);
}

template <typename T>
void qk_rmsnorm_forward(const T* x, const float* wq, const float* wk, T* y, float* rstd,
                        int64_t groups, int64_t q_slots, int64_t Dh, float eps) {
  const int64_t slots = q_slots + 2, rows = groups * slots;
#pragma omp parallel for schedule(static) if (rows * Dh > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / slots, slot = r % slots;
    if (slot == q_slots + 1) {  // the value head
      for (int64_t j = 0; j < Dh; ++j) y[r * Dh + j] = x[r * Dh + j];
      continue;
    }
    rstd[g * (q_slots + 1) + slot] =
        rms_row_forward(x + r * Dh, slot < q_slots ? wq : wk, y + r * Dh, Dh, eps);
  }
}

template <typename T>
void qk_rmsnorm_backward(const T* x, const float* wq, const float* wk, const float* rstd,
                         const T* dy, T* dx, float* dwq, float* dwk, int64_t groups,
                         int64_t q_slots, int64_t Dh) {
  const int64_t slots = q_slots + 2, rows = groups * slots;
  // Weight gradients first: dx may alias dy.
  for (int64_t slot = 0; slot <= q_slots; ++slot)
    norm_param_grads(x + slot * Dh, nullptr, rstd + slot, dy + slot * Dh,
                     slot < q_slots ? dwq : dwk, nullptr, groups, Dh, slots * Dh, q_slots + 1);
#pragma omp parallel for schedule(static) if (rows * Dh > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / slots, slot = r % slots;
    if (slot == q_slots + 1) {
      for (int64_t j = 0; j < Dh; ++j) dx[r * Dh + j] = dy[r * Dh + j];
      continue;
    }
    rms_row_backward(x + r * Dh, slot < q_slots ? wq : wk, rstd[g * (q_slots + 1) + slot],
                     dy + r * Dh, dx + r * Dh, Dh);
  }
}

// The q (part 0) and k (part 1) spans of group g inside a token's fused QKV row, and their
// weights: the q heads are the group's first q_slots slots, the key head the next one.
struct QkSpan {
  int64_t x_offset, w_offset, width;
};
inline QkSpan qk_span(const QkProjection& p, int64_t g, int part) {
  const int64_t Dh = p.head_dim, slots = p.q_slots + 2;
  return part == 0 ? QkSpan{g * slots * Dh, g * p.q_slots * Dh, p.q_slots * Dh}
                   : QkSpan{(g * slots + p.q_slots) * Dh, g * Dh, Dh};
}

template <typename T>
void qk_projection_sums(const T* x, const T* dy, const float* wq, const float* wk, float* sums,
                        const QkProjection& p) {
  const int64_t row = p.row();
#pragma omp parallel for schedule(static) if (p.tokens * row > detail::kParallelGrain)
  for (int64_t t = 0; t < p.tokens; ++t) {
    for (int part = 0; part < 2; ++part) {
      const float* w = part == 0 ? wq : wk;
      float acc = 0.0f;
      for (int64_t g = 0; g < p.groups; ++g) {
        const QkSpan s = qk_span(p, g, part);
        const T* xr = x + t * row + s.x_offset;
        if (dy == nullptr) {
#pragma omp simd reduction(+ : acc)
          for (int64_t j = 0; j < s.width; ++j) acc += to_f32(xr[j]) * to_f32(xr[j]);
        } else {
          const T* dyr = dy + t * row + s.x_offset;
          const float* wr = w + s.w_offset;
#pragma omp simd reduction(+ : acc)
          for (int64_t j = 0; j < s.width; ++j) acc += to_f32(dyr[j]) * wr[j] * to_f32(xr[j]);
        }
      }
      sums[2 * t + part] = acc;
    }
  }
}

template <typename T>
void qk_projection_norm_forward(const T* x, const float* wq, const float* wk, const float* sums,
                                T* y, float* rstd, const QkProjection& p) {
  const int64_t row = p.row(), Dh = p.head_dim;
#pragma omp parallel for schedule(static) if (p.tokens * row > detail::kParallelGrain)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float width[2] = {float(p.q_width), float(p.k_width)};
    for (int part = 0; part < 2; ++part) {
      const float rs = 1.0f / std::sqrt(sums[2 * t + part] / width[part] + p.eps);
      rstd[2 * t + part] = rs;
      for (int64_t g = 0; g < p.groups; ++g) {
        const QkSpan s = qk_span(p, g, part);
        const T* xr = x + t * row + s.x_offset;
        const float* wr = (part == 0 ? wq : wk) + s.w_offset;
        T* yr = y + t * row + s.x_offset;
#pragma omp simd
        for (int64_t j = 0; j < s.width; ++j) yr[j] = from_f32<T>(to_f32(xr[j]) * rs * wr[j]);
      }
    }
    for (int64_t g = 0; g < p.groups; ++g) {  // the value head
      const int64_t v = t * row + (g * (p.q_slots + 2) + p.q_slots + 1) * Dh;
      for (int64_t j = 0; j < Dh; ++j) y[v + j] = x[v + j];
    }
  }
}

template <typename T>
void qk_projection_norm_backward(const T* x, const float* wq, const float* wk, const float* rstd,
                                 const float* dots, const T* dy, T* dx, float* dwq, float* dwk,
                                 const QkProjection& p) {
  const int64_t row = p.row(), Dh = p.head_dim;
  // Weight gradients first: dx may alias dy.
  for (int64_t g = 0; g < p.groups; ++g)
    for (int part = 0; part < 2; ++part) {
      const QkSpan s = qk_span(p, g, part);
      norm_param_grads(x + s.x_offset, nullptr, rstd + part, dy + s.x_offset,
                       (part == 0 ? dwq : dwk) + s.w_offset, nullptr, p.tokens, s.width, row, 2);
    }
#pragma omp parallel for schedule(static) if (p.tokens * row > detail::kParallelGrain)
  for (int64_t t = 0; t < p.tokens; ++t) {
    const float width[2] = {float(p.q_width), float(p.k_width)};
    for (int part = 0; part < 2; ++part) {
      const float rs = rstd[2 * t + part], b = rs * rs * rs * dots[2 * t + part] / width[part];
      for (int64_t g = 0; g < p.groups; ++g) {
        const QkSpan s = qk_span(p, g, part);
        const T* xr = x + t * row + s.x_offset;
        const T* dyr = dy + t * row + s.x_offset;
        const float* wr = (part == 0 ? wq : wk) + s.w_offset;
        T* dxr = dx + t * row + s.x_offset;
#pragma omp simd
        for (int64_t j = 0; j < s.width; ++j)
          dxr[j] = from_f32<T>(rs * wr[j] * to_f32(dyr[j]) - to_f32(xr[j]) * b);
      }
    }
    for (int64_t g = 0; g < p.groups; ++g) {  // the value head
      const int64_t v = t * row + (g * (p.q_slots + 2) + p.q_slots + 1) * Dh;
      for (int64_t j = 0; j < Dh; ++j) dx[v + j] = dy[v + j];
    }
  }
}

#define MT_INSTANTIATE(T)                                                                          \
  template void layernorm_forward<T>(const T*, const float*, const float*, T*, float*, float*,     \
                                     int64_t, int64_t, float);                                     \
  template void layernorm_backward<T>(const T*, const float*, const float*, const float*,          \
                                      const T*, T*, float*, float*, int64_t, int64_t);             \
  template void rmsnorm_forward<T>(const T*, const float*, T*, float*, int64_t, int64_t, float);   \
  template void rmsnorm_backward<T>(const T*, const float*, const float*, const T*, T*, float*,    \
                                    int64_t, int64_t);                                             \
  template void qk_rmsnorm_forward<T>(const T*, const float*, const float*, T*, float*, int64_t,   \
                                      int64_t, int64_t, float);                                    \
  template void qk_rmsnorm_backward<T>(const T*, const float*, const float*, const float*,         \
                                       const T*, T*, float*, float*, int64_t, int64_t, int64_t);   \
  template void qk_projection_sums<T>(const T*, const T*, const float*, const float*, float*,      \
                                      const QkProjection&);                                        \
  template void qk_projection_norm_forward<T>(const T*, const float*, const float*, const float*,  \
                                              T*, float*, const QkProjection&);                    \
  template void qk_projection_norm_backward<T>(const T*, const float*, const float*, const float*, \
                                               const float*, const T*, T*, float*, float*,         \
                                               const QkProjection&);
MT_INSTANTIATE(float)
MT_INSTANTIATE(bf16_t)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cpu
