#include <cmath>

#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_attention.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarps = 8;  // warps sharing one query's keys
constexpr int kThreads = kWarps * 32;
constexpr int kPerLane = int(kKvMaxHeadDim / 32);  // output elements per lane
constexpr unsigned kFull = 0xffffffffu;
constexpr unsigned kMaxGridY = 65535;

struct KvGeo {
  int64_t S, B, H, G, Dh, per, past, capacity, window;
  float scale, softcap;  // softcap 0: none
};

// Copies the new positions' key and value heads out of qkv into the caches (one element per
// thread of a grid-stride loop).
template <typename T>
__global__ void kv_append_kernel(KvGeo L, const T* qkv, T* keys, T* values) {
  const int64_t n = L.S * L.B * L.G * L.Dh;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % L.Dh, row = e / L.Dh;  // row = (s * B + b) * G + g
    const int64_t g = row % L.G, b = (row / L.G) % L.B, s = row / (L.G * L.B);
    const T* src = qkv + row * (L.per + 2) * L.Dh;
    const int64_t at = ((b * L.G + g) * L.capacity + L.past + s) * L.Dh + d;
    keys[at] = src[L.per * L.Dh + d];
    values[at] = src[(L.per + 1) * L.Dh + d];
  }
}

// Block (b * H + h, query rows from blockIdx.y). Warp w takes the 32-key tiles w, w + kWarps, ...
// of the visible range [first, lim): lane j scores key c0 + j, then the warp folds the tile into
// its running max m, sum l and output acc; the warps' partial results merge through shared memory.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    kv_attention_kernel(KvGeo L, const T* qkv, const T* keys, const T* values, const float* sinks,
                        T* out) {
  __shared__ float q[kKvMaxHeadDim];
  __shared__ float part_acc[kWarps][kKvMaxHeadDim];
  __shared__ float part_m[kWarps], part_l[kWarps];
  const int Dh = int(L.Dh), warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x / L.H, h = blockIdx.x % L.H, g = h / L.per;
  const T* K = keys + (b * L.G + g) * L.capacity * L.Dh;
  const T* V = values + (b * L.G + g) * L.capacity * L.Dh;
  for (int64_t i = blockIdx.y; i < L.S; i += gridDim.y) {
    const T* Q = qkv + ((i * L.B + b) * L.G + g) * (L.per + 2) * L.Dh + (h % L.per) * L.Dh;
    __syncthreads();  // the previous row's q and partial results are consumed
    for (int d = threadIdx.x; d < Dh; d += kThreads) q[d] = to_float(Q[d]);
    __syncthreads();
    const int64_t lim = L.past + i + 1;  // causal: keys up to this query's position
    const int64_t first = L.window > 0 && lim > L.window ? lim - L.window : 0;
    float acc[kPerLane];
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t c0 = first + int64_t(warp) * 32; c0 < lim; c0 += int64_t(kWarps) * 32) {
      const int cols = int(lim - c0 < 32 ? lim - c0 : 32);
      float s = -INFINITY;
      if (lane < cols) {
        const T* k = K + (c0 + lane) * L.Dh;
        float dot = 0.0f;
        for (int d = 0; d < Dh; ++d) dot += q[d] * to_float(k[d]);
        s = dot * L.scale;
        if (L.softcap > 0.0f) s = math::softcap(s, L.softcap);
      }
      // Lane 0 always scores a key, so mx is finite.
      const float mx = fmaxf(m, warp_max(s));
      const float alpha = m == -INFINITY ? 0.0f : math::exp_approx(m - mx);
      const float p = lane < cols ? math::exp_approx(s - mx) : 0.0f;
      l = l * alpha + warp_sum(p);
      m = mx;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) acc[t] *= alpha;
      for (int jj = 0; jj < cols; ++jj) {
        const float pb = __shfl_sync(kFull, p, jj);
        const T* v = V + (c0 + jj) * L.Dh;
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int d = lane + 32 * t;
          if (d < Dh) acc[t] += pb * to_float(v[d]);
        }
      }
    }
    // A warp without keys leaves m = -inf, l = 0 and zeros: it adds nothing below.
    if (lane == 0) part_m[warp] = m, part_l[warp] = l;
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) {
      const int d = lane + 32 * t;
      if (d < Dh) part_acc[warp][d] = acc[t];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, part_m[w]);
    float weight[kWarps], sum = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      weight[w] = part_m[w] == -INFINITY ? 0.0f : math::exp_approx(part_m[w] - M);
      sum += weight[w] * part_l[w];
    }
    if (sinks != nullptr) sum += expf(sinks[h] - M);  // a sink: in the denominator, no value
    const float inv = 1.0f / sum;                     // > 0: every query sees at least its own key
    T* O = out + ((i * L.B + b) * L.H + h) * L.Dh;
    for (int d = threadIdx.x; d < Dh; d += kThreads) {
      float o = 0.0f;
      for (int w = 0; w < kWarps; ++w) o += weight[w] * part_acc[w][d];
      O[d] = from_float<T>(o * inv);
    }
  }
}

}  // namespace

template <typename T>
void kv_cache_attention(const AttentionShape& s, float scale, const T* qkv, T* keys, T* values,
                        int64_t past, int64_t capacity, T* out, int64_t window, float softcap,
                        const float* sinks, cudaStream_t stream) {
  MT_CHECK(s.G > 0 && s.H % s.G == 0, "kv_cache_attention (CUDA): heads ", s.H,
           " not divisible by groups ", s.G);
  MT_CHECK(s.Dh >= 1 && s.Dh <= kKvMaxHeadDim, "kv_cache_attention (CUDA): head dim ", s.Dh,
           " outside [1, ", kKvMaxHeadDim, "]");
  MT_CHECK(past >= 0 && past + s.S <= capacity, "kv_cache_attention (CUDA): positions ", past, "..",
           past + s.S, " past the cache capacity ", capacity);
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(softcap >= 0.0f, "kv_cache_attention (CUDA): softcap ", softcap, " < 0");
  const KvGeo L{s.S, s.B, s.H, s.G, s.Dh, s.H / s.G, past, capacity, window, scale, softcap};
  const int64_t copies = s.S * s.B * s.G * s.Dh;
  kv_append_kernel<T><<<detail::grid_for(copies, 256), 256, 0, stream>>>(L, qkv, keys, values);
  MT_CUDA_LAUNCH_CHECK();
  const dim3 grid(static_cast<unsigned>(s.B * s.H),
                  static_cast<unsigned>(s.S < kMaxGridY ? s.S : kMaxGridY));
  kv_attention_kernel<T><<<grid, kThreads, 0, stream>>>(L, qkv, keys, values, sinks, out);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                      \
  template void kv_cache_attention<T>(const AttentionShape&, float, const T*, T*, T*, int64_t, \
                                      int64_t, T*, int64_t, float, const float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
