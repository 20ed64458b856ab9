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
template <typename T>
void norm_param_grads(const T* x, const float* mean, const float* rstd, const T* dy, float* dweight,
                      float* dbias, int64_t rows, int64_t D) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t j0 = 0; j0 < D; j0 += kColBlock) {
    const int64_t w = j0 + kColBlock < D ? kColBlock : D - j0;
    float acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * D + j0;
      const T* dyr = dy + r * D + j0;
      const float m = mean ? mean[r] : 0.0f, s = rstd[r];
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
  norm_param_grads(x, mean, rstd, dy, dweight, dbias, rows, D);
}

template <typename T>
void rmsnorm_forward(const T* x, const float* weight, T* y, float* rstd, int64_t rows, int64_t D,
                     float eps) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < D; ++j) sq += to_f32(xr[j]) * to_f32(xr[j]);
    const float rs = 1.0f / std::sqrt(sq / float(D) + eps);
#pragma omp simd
    for (int64_t j = 0; j < D; ++j) yr[j] = from_f32<T>(to_f32(xr[j]) * rs * weight[j]);
    rstd[r] = rs;
  }
}

template <typename T>
void rmsnorm_backward(const T* x, const float* weight, const float* rstd, const T* dy, T* dx,
                      float* dweight, int64_t rows, int64_t D) {
#pragma omp parallel for schedule(static) if (rows * D > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    const T* dyr = dy + r * D;
    T* dxr = dx + r * D;
    const float rs = rstd[r];
    float sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_gx)
    for (int64_t j = 0; j < D; ++j) sum_gx += to_f32(dyr[j]) * weight[j] * (to_f32(xr[j]) * rs);
    const float b = sum_gx / float(D);
#pragma omp simd
    for (int64_t j = 0; j < D; ++j)
      dxr[j] = from_f32<T>(rs * (to_f32(dyr[j]) * weight[j] - to_f32(xr[j]) * rs * b));
  }
  norm_param_grads(x, nullptr, rstd, dy, dweight, nullptr, rows, D);
}

#define MT_INSTANTIATE(T)                                                                        \
  template void layernorm_forward<T>(const T*, const float*, const float*, T*, float*, float*,   \
                                     int64_t, int64_t, float);                                   \
  template void layernorm_backward<T>(const T*, const float*, const float*, const float*,        \
                                      const T*, T*, float*, float*, int64_t, int64_t);           \
  template void rmsnorm_forward<T>(const T*, const float*, T*, float*, int64_t, int64_t, float); \
  template void rmsnorm_backward<T>(const T*, const float*, const float*, const T*, T*, float*,  \
                                    int64_t, int64_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(bf16_t)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cpu
