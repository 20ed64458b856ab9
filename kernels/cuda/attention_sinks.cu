#include "kernels/cuda/attention_sinks.h"
#include "kernels/cuda/common.cuh"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / detail::kWarp;

struct SinkGeo {
  int64_t S, B, H, Dh;
};

// r = sigmoid(lse - sigma); 0 for a fully masked row (as the CPU's sink_scale).
__device__ __forceinline__ float sink_scale(float lse, float sigma) {
  if (isinf(lse) && lse < 0.0f) return 0.0f;
  return 1.0f / (1.0f + expf(sigma - lse));
}

template <typename T>
__global__ void sinks_forward_kernel(SinkGeo L, const float* sinks, const float* lse, T* out) {
  const int64_t n = L.S * L.B * L.H * L.Dh;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / L.Dh;  // (s * B + b) * H + h
    const int64_t h = row % L.H, b = (row / L.H) % L.B, s = row / (L.H * L.B);
    const float r = sink_scale(lse[(b * L.H + h) * L.S + s], sinks[h]);
    out[e] = from_float<T>(to_float(out[e]) * r);
  }
}

// Block h: warp w takes the rows t = w, w + kWarps, ... of the B * S rows of head h (t = b * S +
// s); its lanes split the row's Dh elements, each reading and then writing its own elements (so
// dout_scaled may be dout).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    sinks_backward_kernel(SinkGeo L, const float* sinks, const float* lse, const T* out,
                          const T* dout, T* dout_scaled, float* dsinks) {
  __shared__ double scratch[detail::kWarp];
  const int64_t h = blockIdx.x;
  const int warp = threadIdx.x / detail::kWarp, lane = threadIdx.x % detail::kWarp;
  const float sigma = sinks[h];
  double acc = 0.0;  // this warp's rows' sum, held by every lane
  for (int64_t t = warp; t < L.B * L.S; t += kWarps) {
    const int64_t b = t / L.S, s = t % L.S;
    const float r = sink_scale(lse[(b * L.H + h) * L.S + s], sigma);
    const int64_t at = ((s * L.B + b) * L.H + h) * L.Dh;
    double dot = 0.0;
    for (int64_t d = lane; d < L.Dh; d += detail::kWarp) {
      const float g = to_float(dout[at + d]);
      dot += double(g) * double(to_float(out[at + d]));
      dout_scaled[at + d] = from_float<T>(r * g);
    }
    acc -= (1.0 - double(r)) * detail::warp_sum(dot);
  }
  const double total = detail::block_sum(lane == 0 ? acc : 0.0, scratch);
  if (dsinks != nullptr && threadIdx.x == 0) dsinks[h] += static_cast<float>(total);
}

}  // namespace

template <typename T>
void attention_sinks_forward(const AttentionShape& s, const float* sinks, const float* lse, T* out,
                             cudaStream_t stream) {
  const int64_t n = s.S * s.B * s.H * s.Dh;
  if (n == 0) return;
  sinks_forward_kernel<T><<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(
      SinkGeo{s.S, s.B, s.H, s.Dh}, sinks, lse, out);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_sinks_backward(const AttentionShape& s, const float* sinks, const float* lse,
                              const T* out, const T* dout, T* dout_scaled, float* dsinks,
                              cudaStream_t stream) {
  if (s.H == 0) return;
  sinks_backward_kernel<T><<<static_cast<unsigned>(s.H), kThreads, 0, stream>>>(
      SinkGeo{s.S, s.B, s.H, s.Dh}, sinks, lse, out, dout, dout_scaled, dsinks);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                         \
  template void attention_sinks_forward<T>(const AttentionShape&, const float*, const float*, T*, \
                                           cudaStream_t);                                         \
  template void attention_sinks_backward<T>(const AttentionShape&, const float*, const float*,    \
                                            const T*, const T*, T*, float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
