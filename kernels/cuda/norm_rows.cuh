#pragma once
// One warp's share of a norm over one row of D elements (fp32 math), shared by the row kernels
// of norm.cu (LayerNorm / RMSNorm) and qk_norm.cu (the per-head q/k RMSNorm): the forward of an
// RMSNorm row and the input gradient of a LayerNorm or RMSNorm row. `lane` is the thread's lane.
#include "kernels/cuda/common.cuh"

namespace megatron::kernels::cuda::detail {

// yr = xr * rstd * w; returns rstd = 1 / sqrt(mean(x^2) + eps).
template <typename T, typename W>
__device__ __forceinline__ float rms_row_forward(const T* xr, const W* w, T* yr, int64_t D,
                                                 float eps, int lane) {
  float sq = 0.0f;
  for (int64_t j = lane; j < D; j += kWarp) {
    const float v = to_float(xr[j]);
    sq += v * v;
  }
  const float rs = 1.0f / sqrtf(warp_sum(sq) / float(D) + eps);
  for (int64_t j = lane; j < D; j += kWarp)
    yr[j] = from_float<T>(to_float(xr[j]) * rs * to_float(w[j]));
  return rs;
}

// dx of a row normalized with mean mu (centered: LayerNorm) or none (RMSNorm) and rstd rs:
// dx = rs (dy w - a - xhat b), a = mean(dy w) (LayerNorm only), b = mean(dy w xhat). dxr may be
// dyr: each lane reads its elements before it writes them.
template <typename T, typename W>
__device__ __forceinline__ void norm_row_dx(const T* xr, const W* w, bool centered, float mu,
                                            float rs, const T* dyr, T* dxr, int64_t D, int lane) {
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = lane; j < D; j += kWarp) {
    const float g = to_float(dyr[j]) * to_float(w[j]);
    sum_g += g;
    sum_gx += g * ((to_float(xr[j]) - mu) * rs);
  }
  const float a = centered ? warp_sum(sum_g) / float(D) : 0.0f;
  const float b = warp_sum(sum_gx) / float(D);
  for (int64_t j = lane; j < D; j += kWarp) {
    const float xhat = (to_float(xr[j]) - mu) * rs;
    dxr[j] = from_float<T>(rs * (to_float(dyr[j]) * to_float(w[j]) - a - xhat * b));
  }
}

}  // namespace megatron::kernels::cuda::detail
