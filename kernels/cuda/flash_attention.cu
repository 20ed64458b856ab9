#include <cmath>
#include <type_traits>

#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_tc.h"
#include "kernels/cuda/flash_geometry.cuh"

namespace megatron::kernels::cuda {
namespace {

using detail::Carver;
using detail::from_float;
using detail::to_float;
using detail::warp_max;
using detail::warp_sum;

constexpr int kTile = 32;  // keys (forward, dQ) or queries (dK/dV) per shared-memory tile
constexpr int kWarps = 8;  // rows (queries or keys) per block, one warp each
constexpr int kThreads = kWarps * 32;
constexpr int kPerLane = int(kFlashMaxHeadDim / 32);  // accumulator elements per lane
constexpr unsigned kFull = 0xffffffffu;

using flash::Geo;
using flash::geo_of;
using flash::Opt;
using flash::opt_of;

__device__ __forceinline__ float drop(float prob, const Opt& o, uint64_t index) {
  return philox::uniform(o.seed, o.stream, index) >= o.p ? prob * o.keep_scale : 0.0f;
}

// Loads rows [r0, r0 + rows) (zeros past `valid`) of a strided [S, Dh] matrix into shared
// memory with row stride ld.
template <typename T>
__device__ void load_tile(float* dst, int ld, const T* src, int64_t src_ld, int64_t r0, int rows,
                          int64_t valid, int Dh) {
  for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e % Dh;
    dst[r * ld + d] = r0 + r < valid ? to_float(src[(r0 + r) * src_ld + d]) : 0.0f;
  }
}

// Forward: block (bh, row tile); warp w handles query i = tile * kWarps + w.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_forward_kernel(Geo L, Opt o, const T* qkv, T* out, float* lse) {
  extern __shared__ float smem[];
  const int Dh = int(L.Dh), ldk = Dh + 1;
  float* Ks = smem;              // [kTile][Dh + 1]
  float* Vs = Ks + kTile * ldk;  // [kTile][Dh]
  float* Qs = Vs + kTile * Dh;   // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t r0 = int64_t(blockIdx.y) * kWarps, i = r0 + warp;
  const bool active = i < L.S;
  const T* Q = qkv + L.q(b, h);
  const T* K = qkv + L.k(b, g);
  const T* V = qkv + L.v(b, g);
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[i] : 0;
  load_tile(Qs, Dh, Q, L.ld_qkv, r0, kWarps, L.S, Dh);
  const float* q = Qs + warp * Dh;
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t kend = o.causal ? min(L.S, r0 + kWarps) : L.S;
  const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(i * L.S) : 0;
  for (int64_t c0 = 0; c0 < kend; c0 += kTile) {
    const int cols = int(kend - c0 < kTile ? kend - c0 : kTile);
    __syncthreads();  // the previous tile is consumed (and Qs is loaded)
    load_tile(Ks, ldk, K, L.ld_qkv, c0, kTile, kend, Dh);
    load_tile(Vs, Dh, V, L.ld_qkv, c0, kTile, kend, Dh);
    __syncthreads();
    if (!active) continue;
    const int64_t j = c0 + lane;
    const bool vis = lane < cols && (!o.causal || j <= i) && (o.window <= 0 || i - j < o.window) &&
                     (!km || km[j]) && (!sg || sg[j] == own);
    float s = -INFINITY;
    if (vis) {
      float dot = 0.0f;
      for (int d = 0; d < Dh; ++d) dot += q[d] * Ks[lane * ldk + d];
      s = dot * o.scale;
    }
    const float mx = fmaxf(m, warp_max(s));
    if (mx == -INFINITY) continue;  // nothing visible yet
    const float alpha = m == -INFINITY ? 0.0f : math::exp_approx(m - mx);
    float pj = vis ? math::exp_approx(s - mx) : 0.0f;
    l = l * alpha + warp_sum(pj);
    m = mx;
    if (o.dropout && vis) pj = drop(pj, o, base + uint64_t(j));
#pragma unroll
    for (int t = 0; t < kPerLane; ++t) acc[t] *= alpha;
    for (int jj = 0; jj < cols; ++jj) {
      const float pb = __shfl_sync(kFull, pj, jj);
      if (pb == 0.0f) continue;  // same value in every lane: no divergence
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < Dh) acc[t] += pb * Vs[jj * Dh + d];
      }
    }
  }
  if (!active) return;
  T* O = out + L.out(b, h) + i * L.ld_out;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < Dh) O[d] = from_float<T>(acc[t] * inv);
  }
  if (lane == 0) lse[bh * L.S + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D[bh, i] = sum_d dout * out, one warp per row.
template <typename T>
__global__ void flash_rowdot_kernel(Geo L, const T* out, const T* dout, float* D) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= L.B * L.H * L.S) return;
  const int64_t bh = row / L.S, i = row % L.S, b = bh / L.H, h = bh % L.H;
  const int64_t off = L.out(b, h) + i * L.ld_out;
  float dot = 0.0f;
  for (int64_t d = lane; d < L.Dh; d += 32) dot += to_float(out[off + d]) * to_float(dout[off + d]);
  dot = warp_sum(dot);
  if (lane == 0) D[row] = dot;
}

// Recomputed quantities of one (query i, key j) pair: probability p, dropped pv, and
// dS = pv * dPv - p * D_i. Lanes pass vis = false for masked pairs (all zero).
struct Pair {
  float p, pv, ds;
};
__device__ __forceinline__ Pair pair_grad(bool vis, const float* q, const float* k, const float* dO,
                                          const float* v, int Dh, float lse_i, float D_i,
                                          const Opt& o, uint64_t index) {
  Pair r{0.0f, 0.0f, 0.0f};
  if (!vis) return r;
  float s = 0.0f, dpv = 0.0f;
  for (int d = 0; d < Dh; ++d) {
    s += q[d] * k[d];
    dpv += dO[d] * v[d];
  }
  r.p = math::exp_approx(s * o.scale - lse_i);
  r.pv = o.dropout ? drop(r.p, o, index) : r.p;
  r.ds = r.pv * dpv - r.p * D_i;
  return r;
}

// dK, dV: block (b*G + g, key tile); warp w handles key j over all heads of group g and all
// query tiles (a fixed order: deterministic, no atomics).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_dkdv_kernel(Geo L, Opt o, const T* qkv, const float* lse, const T* dout, const float* D,
                      T* dqkv) {
  extern __shared__ float smem[];
  const int Dh = int(L.Dh), ldq = Dh + 1;
  float* Qs = smem;               // [kTile][Dh + 1]
  float* dOs = Qs + kTile * ldq;  // [kTile][Dh + 1]
  float* ks = dOs + kTile * ldq;  // [kWarps][Dh]
  float* vs = ks + kWarps * Dh;   // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bg = blockIdx.x, b = bg / L.G, g = bg % L.G;
  const int64_t c0 = int64_t(blockIdx.y) * kWarps, j = c0 + warp;
  const bool active = j < L.S;
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const bool key_visible = active && (!km || km[j]);
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[j] : 0;
  load_tile(ks, Dh, qkv + L.k(b, g), L.ld_qkv, c0, kWarps, L.S, Dh);
  load_tile(vs, Dh, qkv + L.v(b, g), L.ld_qkv, c0, kWarps, L.S, Dh);
  const float* k = ks + warp * Dh;
  const float* v = vs + warp * Dh;
  float acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc_k[t] = acc_v[t] = 0.0f;
  const int64_t first = o.causal ? c0 / kTile * kTile : 0;
  for (int64_t h = g * L.hpg; h < (g + 1) * L.hpg; ++h) {
    const int64_t bh = b * L.H + h;
    const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(j) : 0;
    for (int64_t r0 = first; r0 < L.S; r0 += kTile) {
      __syncthreads();
      load_tile(Qs, ldq, qkv + L.q(b, h), L.ld_qkv, r0, kTile, L.S, Dh);
      load_tile(dOs, ldq, dout + L.out(b, h), L.ld_out, r0, kTile, L.S, Dh);
      __syncthreads();
      if (!active) continue;
      const int64_t i = r0 + lane;
      const float lse_i = i < L.S ? lse[bh * L.S + i] : -INFINITY;
      const bool vis = key_visible && i < L.S && (!o.causal || j <= i) &&
                       (o.window <= 0 || i - j < o.window) && lse_i != -INFINITY &&
                       (!sg || sg[i] == own);
      const Pair pr = pair_grad(vis, Qs + lane * ldq, k, dOs + lane * ldq, v, Dh, lse_i,
                                vis ? D[bh * L.S + i] : 0.0f, o, base + uint64_t(i * L.S));
      for (int ii = 0; ii < kTile; ++ii) {
        const float pv = __shfl_sync(kFull, pr.pv, ii), ds = __shfl_sync(kFull, pr.ds, ii);
        if (pv == 0.0f && ds == 0.0f) continue;
#pragma unroll
        for (int t = 0; t < kPerLane; ++t) {
          const int d = lane + 32 * t;
          if (d < Dh) {
            acc_v[t] += pv * dOs[ii * ldq + d];
            acc_k[t] += ds * Qs[ii * ldq + d];
          }
        }
      }
    }
  }
  if (!active) return;
  T* dK = dqkv + L.k(b, g) + j * L.ld_qkv;
  T* dV = dqkv + L.v(b, g) + j * L.ld_qkv;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < Dh) {
      dK[d] = from_float<T>(acc_k[t] * o.scale);
      dV[d] = from_float<T>(acc_v[t]);
    }
  }
}

// dQ: block (bh, row tile); warp w handles query i over the key tiles.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    flash_dq_kernel(Geo L, Opt o, const T* qkv, const float* lse, const T* dout, const float* D,
                    T* dqkv) {
  extern __shared__ float smem[];
  const int Dh = int(L.Dh), ldk = Dh + 1;
  float* Ks = smem;               // [kTile][Dh + 1]
  float* Vs = Ks + kTile * ldk;   // [kTile][Dh + 1]
  float* qs = Vs + kTile * ldk;   // [kWarps][Dh]
  float* dos = qs + kWarps * Dh;  // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t r0 = int64_t(blockIdx.y) * kWarps, i = r0 + warp;
  const bool active = i < L.S;
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[i] : 0;
  load_tile(qs, Dh, qkv + L.q(b, h), L.ld_qkv, r0, kWarps, L.S, Dh);
  load_tile(dos, Dh, dout + L.out(b, h), L.ld_out, r0, kWarps, L.S, Dh);
  const float lse_i = active ? lse[bh * L.S + i] : -INFINITY;
  const float D_i = active ? D[bh * L.S + i] : 0.0f;
  const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(i * L.S) : 0;
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  const int64_t kend = o.causal ? min(L.S, r0 + kWarps) : L.S;
  for (int64_t c0 = 0; c0 < kend; c0 += kTile) {
    const int cols = int(kend - c0 < kTile ? kend - c0 : kTile);
    __syncthreads();
    load_tile(Ks, ldk, qkv + L.k(b, g), L.ld_qkv, c0, kTile, kend, Dh);
    load_tile(Vs, ldk, qkv + L.v(b, g), L.ld_qkv, c0, kTile, kend, Dh);
    __syncthreads();
    if (!active || lse_i == -INFINITY) continue;
    const int64_t j = c0 + lane;
    const bool vis = lane < cols && (!o.causal || j <= i) && (o.window <= 0 || i - j < o.window) &&
                     (!km || km[j]) && (!sg || sg[j] == own);
    const Pair pr = pair_grad(vis, qs + warp * Dh, Ks + lane * ldk, dos + warp * Dh,
                              Vs + lane * ldk, Dh, lse_i, D_i, o, base + uint64_t(j));
    for (int jj = 0; jj < cols; ++jj) {
      const float ds = __shfl_sync(kFull, pr.ds, jj);
      if (ds == 0.0f) continue;
#pragma unroll
      for (int t = 0; t < kPerLane; ++t) {
        const int d = lane + 32 * t;
        if (d < Dh) acc[t] += ds * Ks[jj * ldk + d];
      }
    }
  }
  if (!active) return;
  T* dQ = dqkv + L.q(b, h) + i * L.ld_qkv;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < Dh) dQ[d] = from_float<T>(acc[t] * o.scale);
  }
}

size_t forward_smem(int64_t Dh) { return size_t(kTile * (2 * Dh + 1) + kWarps * Dh) * 4; }
size_t dkdv_smem(int64_t Dh) { return size_t(2 * kTile * (Dh + 1) + 2 * kWarps * Dh) * 4; }
size_t dq_smem(int64_t Dh) { return size_t(2 * kTile * (Dh + 1) + 2 * kWarps * Dh) * 4; }

// Allows `bytes` of dynamic shared memory (above the 48 KiB default for Dh > 128).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    MT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

void check(const AttentionShape& s, const AttentionOptions& opt, DType dtype, const char* op) {
  const FlashAttentionSupport sup = flash_attention_support(s, opt, dtype);
  MT_CHECK(sup.supported, op, ": ", sup.reason);
}

dim3 grid_of(int64_t pairs, int64_t S) {
  MT_CHECK(pairs <= 0x7fffffff && (S + kWarps - 1) / kWarps <= 65535,
           "flash_attention (CUDA): problem too large for the grid (pairs=", pairs, " S=", S, ")");
  return dim3(unsigned(pairs), unsigned((S + kWarps - 1) / kWarps));
}

}  // namespace

FlashAttentionSupport flash_attention_support(const AttentionShape& s, const AttentionOptions& opt,
                                              DType dtype) {
  FlashAttentionSupport r;
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    r.reason = concat("flash attention: dtype ", dtype_name(dtype), " (needs f32, bf16 or f16)");
  } else if (s.Dh < 1 || s.Dh > kFlashMaxHeadDim) {
    r.reason = concat("flash attention: head dim ", s.Dh, " outside [1, ", kFlashMaxHeadDim, "]");
  } else if (s.S < 0 || s.B < 0 || s.G <= 0 || s.H % s.G != 0) {
    r.reason = concat("flash attention: bad shape S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G);
  } else if (!(opt.dropout_p >= 0.0f && opt.dropout_p < 1.0f)) {
    r.reason = concat("flash attention: dropout_p ", opt.dropout_p, " outside [0, 1)");
  } else {
    r.supported = true;
  }
  return r;
}

size_t flash_attention_forward_workspace_bytes(const AttentionShape&) { return 0; }
size_t flash_attention_backward_workspace_bytes(const AttentionShape& s) {
  Carver c(nullptr);
  c.take<float>(s.B * s.H * s.S);  // D
  return c.bytes();
}

template <typename T>
void flash_attention_forward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv,
                             T* out, float* lse, void*, cudaStream_t stream) {
  check(s, opt, detail::dtype_of<T>(), "flash_attention_forward");
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  if constexpr (!std::is_same_v<T, float>) {
    if (flash_tc::runs(s, opt, detail::dtype_of<T>())) {
      flash_tc::forward(s, opt, qkv, out, lse, stream);
      return;
    }
  }
  const size_t smem = forward_smem(s.Dh);
  allow_smem(flash_forward_kernel<T>, smem);
  flash_forward_kernel<T>
      <<<grid_of(s.B * s.H, s.S), kThreads, smem, stream>>>(geo_of(s), opt_of(opt), qkv, out, lse);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void flash_attention_backward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv,
                              const T* out, const float* lse, const T* dout, T* dqkv,
                              void* workspace, cudaStream_t stream) {
  check(s, opt, detail::dtype_of<T>(), "flash_attention_backward");
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(workspace != nullptr, "flash_attention_backward (CUDA): no workspace (need ",
           flash_attention_backward_workspace_bytes(s), " bytes)");
  Carver carver(workspace);
  float* D = carver.take<float>(s.B * s.H * s.S);
  const Geo L = geo_of(s);
  const Opt o = opt_of(opt);
  const int64_t rows = s.B * s.H * s.S;
  flash_rowdot_kernel<T>
      <<<unsigned((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(L, out, dout, D);
  MT_CUDA_LAUNCH_CHECK();
  if constexpr (!std::is_same_v<T, float>) {
    if (flash_tc::runs(s, opt, detail::dtype_of<T>())) {
      flash_tc::backward(s, opt, qkv, lse, dout, D, dqkv, stream);
      return;
    }
  }
  const size_t smem_kv = dkdv_smem(s.Dh);
  allow_smem(flash_dkdv_kernel<T>, smem_kv);
  flash_dkdv_kernel<T>
      <<<grid_of(s.B * s.G, s.S), kThreads, smem_kv, stream>>>(L, o, qkv, lse, dout, D, dqkv);
  MT_CUDA_LAUNCH_CHECK();
  const size_t smem_q = dq_smem(s.Dh);
  allow_smem(flash_dq_kernel<T>, smem_q);
  flash_dq_kernel<T>
      <<<grid_of(s.B * s.H, s.S), kThreads, smem_q, stream>>>(L, o, qkv, lse, dout, D, dqkv);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                          \
  template void flash_attention_forward<T>(const kernels::AttentionShape&,                         \
                                           const kernels::AttentionOptions&, const T*, T*, float*, \
                                           void*, cudaStream_t);                                   \
  template void flash_attention_backward<T>(const kernels::AttentionShape&,                        \
                                            const kernels::AttentionOptions&, const T*, const T*,  \
                                            const float*, const T*, T*, void*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
