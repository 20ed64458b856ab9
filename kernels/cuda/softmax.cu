#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/softmax.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, int64_t L, float scale) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * L;
  T* yr = y + blockIdx.x * L;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x) mx = fmaxf(mx, scale * to_float(xr[j]));
  mx = detail::block_max(mx, scratch);
  if (mx == -INFINITY) {  // every entry -inf: no mass anywhere
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) yr[j] = from_float<T>(0.0f);
    return;
  }
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
    sum += math::exp_approx(scale * to_float(xr[j]) - mx);
  sum = detail::block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
    yr[j] = from_float<T>(math::exp_approx(scale * to_float(xr[j]) - mx) * inv);
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t L, float scale) {
  __shared__ float scratch[32];
  const int64_t off = blockIdx.x * L;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
    dot += to_float(dy[off + j]) * to_float(y[off + j]);
  dot = detail::block_sum(dot, scratch);
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
    dx[off + j] = from_float<T>(scale * to_float(y[off + j]) * (to_float(dy[off + j]) - dot));
}

}  // namespace

template <typename T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t L, float scale, cudaStream_t stream) {
  if (rows <= 0 || L <= 0) return;
  MT_CHECK(rows <= 0x7fffffff, "softmax (CUDA): ", rows, " rows exceed the grid");
  softmax_forward_kernel<<<unsigned(rows), detail::row_threads(L, 512), 0, stream>>>(x, y, L,
                                                                                     scale);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t L, float scale,
                      cudaStream_t stream) {
  if (rows <= 0 || L <= 0) return;
  MT_CHECK(rows <= 0x7fffffff, "softmax (CUDA): ", rows, " rows exceed the grid");
  softmax_backward_kernel<<<unsigned(rows), detail::row_threads(L, 512), 0, stream>>>(y, dy, dx, L,
                                                                                      scale);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                \
  template void softmax_forward<T>(const T*, T*, int64_t, int64_t, float, cudaStream_t); \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, float, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
