#include <mma.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention_tc.h"
#include "kernels/cuda/flash_geometry.cuh"

namespace megatron::kernels::cuda::flash_tc {
namespace {

using namespace nvcuda;
using detail::from_float;
using detail::warp_max;
using detail::warp_sum;
using flash::Geo;
using flash::Opt;

constexpr int kRows = 64;  // queries (forward, dQ) or keys (dK/dV) per block
constexpr int kCols = 64;  // keys (forward, dQ) or queries (dK/dV) per tile
constexpr int kWarps = 4;  // 16 rows each
constexpr int kThreads = kWarps * 32;
constexpr int kMaxHeadDim = 128;

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::col_major>;
template <typename T>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Rows [r0, r0 + rows) of a strided [S, Dh] matrix into a dense [rows][Dh] shared tile, zeros
// past `valid`; 16-byte copies when the buffer allows (vec), else element by element.
template <typename T>
__device__ void load_rows(T* dst, const T* src, int64_t ld, int64_t r0, int rows, int64_t valid,
                          int Dh, bool vec) {
  if (vec) {
    const int per_row = Dh / 8;  // 8 x 16-bit per 16 bytes
    for (int e = threadIdx.x; e < rows * per_row; e += blockDim.x) {
      const int r = e / per_row, c = e % per_row;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (r0 + r < valid) v = reinterpret_cast<const uint4*>(src + (r0 + r) * ld)[c];
      reinterpret_cast<uint4*>(dst + r * Dh)[c] = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e % Dh;
    dst[r * Dh + d] = r0 + r < valid ? src[(r0 + r) * ld + d] : from_float<T>(0.0f);
  }
}

// s[16][64] (ld 64) = a[16][Dh] (ld Dh) . b[64][Dh]^T (ld Dh): one warp.
template <typename T>
__device__ void product_abt(const T* a, const T* b, float* s, int Dh) {
  for (int n = 0; n < kCols / 16; ++n) {
    Acc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < Dh; k += 16) {
      FragA<T> fa;
      FragBt<T> fb;
      wmma::load_matrix_sync(fa, a + k, Dh);
      wmma::load_matrix_sync(fb, b + n * 16 * Dh + k, Dh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(s + n * 16, acc, kCols, wmma::mem_row_major);
  }
}

// o[16][Dh] (fp32, ld Dh) += p[16][64] (ld 64) . v[64][Dh] (ld Dh): one warp.
template <typename T>
__device__ void accumulate_ab(const T* p, const T* v, float* o, int Dh) {
  for (int n = 0; n < Dh / 16; ++n) {
    Acc acc;
    wmma::load_matrix_sync(acc, o + n * 16, Dh, wmma::mem_row_major);
    for (int k = 0; k < kCols; k += 16) {
      FragA<T> fa;
      FragB<T> fb;
      wmma::load_matrix_sync(fa, p + k, kCols);
      wmma::load_matrix_sync(fb, v + k * Dh + n * 16, Dh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(o + n * 16, acc, Dh, wmma::mem_row_major);
  }
}

// o[16][Dh] (fp32, ld Dh) += p^T[16][64] . x[64][Dh], where p is [64][64] (ld 64) and this
// warp's 16 rows of p^T are its columns c0..c0+15: one warp.
template <typename T>
__device__ void accumulate_atb(const T* p, int c0, const T* x, float* o, int Dh) {
  for (int n = 0; n < Dh / 16; ++n) {
    Acc acc;
    wmma::load_matrix_sync(acc, o + n * 16, Dh, wmma::mem_row_major);
    for (int k = 0; k < kCols; k += 16) {
      FragAt<T> fa;
      FragB<T> fb;
      wmma::load_matrix_sync(fa, p + k * kCols + c0, kCols);
      wmma::load_matrix_sync(fb, x + k * Dh + n * 16, Dh);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(o + n * 16, acc, Dh, wmma::mem_row_major);
  }
}

// The masks of the SIMT kernels: query i sees key j.
__device__ __forceinline__ bool visible(const Geo& L, const Opt& o, int64_t b, int64_t i,
                                        int64_t j) {
  if (i >= L.S || j >= L.S) return false;
  if (o.causal && j > i) return false;
  if (o.window > 0 && i - j >= o.window) return false;
  if (o.key_mask && !o.key_mask[b * L.S + j]) return false;
  if (o.segment_ids && o.segment_ids[b * L.S + i] != o.segment_ids[b * L.S + j]) return false;
  return true;
}

// The key tiles a query tile [r0, r0 + kRows) can see: [first, end).
__device__ __forceinline__ void key_range(const Geo& L, const Opt& o, int64_t r0, int64_t* first,
                                          int64_t* end) {
  *end = o.causal ? min(L.S, r0 + kRows) : L.S;
  const int64_t lo = o.window > 0 ? r0 - o.window + 1 : 0;
  *first = lo > 0 ? lo / kCols * kCols : 0;
}

// Forward: block (bh, query tile); warp w owns query rows w*16 .. w*16+15 of the tile.
// A scaled score, soft-capped when o.softcap > 0 (Gemma 2); *grad: the cap's derivative.
__device__ __forceinline__ float capped(float score, const Opt& o, float* grad) {
  if (o.softcap <= 0.0f) return score;
  const float t = tanhf(score / o.softcap);
  if (grad) *grad = 1.0f - t * t;
  return o.softcap * t;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Geo L, Opt o, const T* qkv, T* out, float* lse, bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int Dh = int(L.Dh);
  T* Qs = reinterpret_cast<T*>(smem);                        // [kRows][Dh]
  T* Ks = Qs + kRows * Dh;                                   // [kCols][Dh]
  T* Vs = Ks + kCols * Dh;                                   // [kCols][Dh]
  T* Ps = Vs + kCols * Dh;                                   // [kRows][kCols]
  float* Ss = reinterpret_cast<float*>(Ps + kRows * kCols);  // [kRows][kCols]
  float* Os = Ss + kRows * kCols;                            // [kRows][Dh]
  float* ms = Os + kRows * Dh;                               // [kRows]
  float* ls = ms + kRows;                                    // [kRows]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t r0 = int64_t(blockIdx.y) * kRows;
  load_rows(Qs, qkv + L.q(b, h), L.ld_qkv, r0, kRows, L.S, Dh, vec);
  for (int e = threadIdx.x; e < kRows * Dh; e += blockDim.x) Os[e] = 0.0f;
  if (threadIdx.x < kRows) {
    ms[threadIdx.x] = -INFINITY;
    ls[threadIdx.x] = 0.0f;
  }
  int64_t first, end;
  key_range(L, o, r0, &first, &end);
  for (int64_t c0 = first; c0 < end; c0 += kCols) {
    __syncthreads();  // the previous tile is consumed (and Qs, Os are ready)
    load_rows(Ks, qkv + L.k(b, g), L.ld_qkv, c0, kCols, end, Dh, vec);
    load_rows(Vs, qkv + L.v(b, g), L.ld_qkv, c0, kCols, end, Dh, vec);
    __syncthreads();
    product_abt(Qs + warp * 16 * Dh, Ks, Ss + warp * 16 * kCols, Dh);
    __syncwarp();
    for (int rr = 0; rr < 16; ++rr) {  // online softmax of this warp's rows
      const int r = warp * 16 + rr;
      const int64_t i = r0 + r;
      const float m_old = ms[r], l_old = ls[r];
      float s[2];
      bool vis[2];
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int c = lane + 32 * t;
        vis[t] = c0 + c < end && visible(L, o, b, i, c0 + c);
        s[t] = vis[t] ? capped(Ss[r * kCols + c] * o.scale, o, nullptr) : -INFINITY;
      }
      const float mx = fmaxf(m_old, warp_max(fmaxf(s[0], s[1])));
      float alpha = 1.0f, p[2] = {0.0f, 0.0f};
      if (mx != -INFINITY) {
        alpha = m_old == -INFINITY ? 0.0f : math::exp_approx(m_old - mx);
#pragma unroll
        for (int t = 0; t < 2; ++t) p[t] = vis[t] ? math::exp_approx(s[t] - mx) : 0.0f;
      }
      const float l_new = l_old * alpha + warp_sum(p[0] + p[1]);
#pragma unroll
      for (int t = 0; t < 2; ++t) Ps[r * kCols + lane + 32 * t] = from_float<T>(p[t]);
      for (int d = lane; d < Dh; d += 32) Os[r * Dh + d] *= alpha;
      __syncwarp();  // every lane has read ms[r], ls[r]
      if (lane == 0) {
        ms[r] = mx;
        ls[r] = l_new;
      }
    }
    __syncwarp();
    accumulate_ab(Ps + warp * 16 * kCols, Vs, Os + warp * 16 * Dh, Dh);
  }
  __syncthreads();
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
    const int64_t i = r0 + r;
    if (i >= L.S) break;
    const float l = ls[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* O = out + L.out(b, h) + i * L.ld_out;
    for (int d = lane; d < Dh; d += 32) O[d] = from_float<T>(Os[r * Dh + d] * inv);
    if (lane == 0) lse[bh * L.S + i] = l > 0.0f ? ms[r] + logf(l) : -INFINITY;
  }
}

// P = exp(cap(scale S) - lse) and dS = P (dP - D) cap', rounded to T, of one warp's 16 rows of a
// [64 queries][64 keys] tile of scores S and dP = dO V^T (fp32): query i = q0 + row, key
// j = k0 + column; masked pairs are zero.
template <typename T>
__device__ void probabilities_and_ds(const Geo& L, const Opt& o, int64_t b, const float* S,
                                     const float* dP, T* Pb, T* dSb, int row0, int64_t q0,
                                     int64_t k0, const float* lse_s, const float* D_s) {
  const int lane = threadIdx.x % 32;
  for (int rr = 0; rr < 16; ++rr) {
    const int r = row0 + rr;
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const int c = lane + 32 * t;
      const int64_t i = q0 + r, j = k0 + c;
      const float lse_i = lse_s[r];
      float p = 0.0f, ds = 0.0f;
      if (lse_i != -INFINITY && visible(L, o, b, i, j)) {
        float cap_grad = 1.0f;
        p = math::exp_approx(capped(S[r * kCols + c] * o.scale, o, &cap_grad) - lse_i);
        ds = p * (dP[r * kCols + c] - D_s[r]) * cap_grad;
      }
      Pb[r * kCols + c] = from_float<T>(p);
      dSb[r * kCols + c] = from_float<T>(ds);
    }
  }
}

__device__ void load_row_stats(const Geo& L, int64_t bh, int64_t r0, const float* lse,
                               const float* D, float* lse_s, float* D_s) {
  if (threadIdx.x < kRows) {
    const int64_t i = r0 + threadIdx.x;
    lse_s[threadIdx.x] = i < L.S ? lse[bh * L.S + i] : -INFINITY;
    D_s[threadIdx.x] = i < L.S ? D[bh * L.S + i] : 0.0f;
  }
}

// dK, dV: block (b*G + g, key tile); over the group's heads and the query tiles that see the
// keys. Warp w computes scores of query rows w*16.. and accumulates key rows w*16...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(Geo L, Opt o, const T* qkv, const float* lse, const T* dout, const float* D,
                T* dqkv, bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int Dh = int(L.Dh);
  T* Ks = reinterpret_cast<T*>(smem);  // [kRows][Dh] (keys)
  T* Vs = Ks + kRows * Dh;
  T* Qs = Vs + kRows * Dh;  // [kCols][Dh] (queries)
  T* dOs = Qs + kCols * Dh;
  T* Pb = dOs + kCols * Dh;  // [kCols][kRows]: query rows, key columns
  T* dSb = Pb + kCols * kRows;
  float* Sf = reinterpret_cast<float*>(dSb + kCols * kRows);  // [kCols][kRows]
  float* dPf = Sf + kCols * kRows;
  float* dKs = dPf + kCols * kRows;  // [kRows][Dh]
  float* dVs = dKs + kRows * Dh;
  float* lse_s = dVs + kRows * Dh;  // [kCols]
  float* D_s = lse_s + kCols;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bg = blockIdx.x, b = bg / L.G, g = bg % L.G;
  const int64_t k0 = int64_t(blockIdx.y) * kRows;
  load_rows(Ks, qkv + L.k(b, g), L.ld_qkv, k0, kRows, L.S, Dh, vec);
  load_rows(Vs, qkv + L.v(b, g), L.ld_qkv, k0, kRows, L.S, Dh, vec);
  for (int e = threadIdx.x; e < kRows * Dh; e += blockDim.x) dKs[e] = dVs[e] = 0.0f;
  const int64_t first = o.causal ? k0 : 0;  // (tiles of 64 on both sides: k0 is a tile start)
  const int64_t end = o.window > 0 ? min(L.S, k0 + kRows + o.window - 1) : L.S;
  for (int64_t h = g * L.hpg; h < (g + 1) * L.hpg; ++h) {
    const int64_t bh = b * L.H + h;
    for (int64_t q0 = first; q0 < end; q0 += kCols) {
      __syncthreads();
      load_rows(Qs, qkv + L.q(b, h), L.ld_qkv, q0, kCols, L.S, Dh, vec);
      load_rows(dOs, dout + L.out(b, h), L.ld_out, q0, kCols, L.S, Dh, vec);
      load_row_stats(L, bh, q0, lse, D, lse_s, D_s);
      __syncthreads();
      product_abt(Qs + warp * 16 * Dh, Ks, Sf + warp * 16 * kRows, Dh);
      product_abt(dOs + warp * 16 * Dh, Vs, dPf + warp * 16 * kRows, Dh);
      __syncwarp();
      probabilities_and_ds(L, o, b, Sf, dPf, Pb, dSb, warp * 16, q0, k0, lse_s, D_s);
      __syncthreads();  // every query row's P and dS feed every warp's key rows
      accumulate_atb(Pb, warp * 16, dOs, dVs + warp * 16 * Dh, Dh);
      accumulate_atb(dSb, warp * 16, Qs, dKs + warp * 16 * Dh, Dh);
    }
  }
  __syncthreads();
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
    const int64_t j = k0 + r;
    if (j >= L.S) break;
    T* dK = dqkv + L.k(b, g) + j * L.ld_qkv;
    T* dV = dqkv + L.v(b, g) + j * L.ld_qkv;
    for (int d = lane; d < Dh; d += 32) {
      dK[d] = from_float<T>(dKs[r * Dh + d] * o.scale);
      dV[d] = from_float<T>(dVs[r * Dh + d]);
    }
  }
}

// dQ: block (bh, query tile); warp w owns query rows w*16.. over the visible key tiles.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(Geo L, Opt o, const T* qkv, const float* lse, const T* dout, const float* D, T* dqkv,
              bool vec) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int Dh = int(L.Dh);
  T* Qs = reinterpret_cast<T*>(smem);  // [kRows][Dh]
  T* dOs = Qs + kRows * Dh;
  T* Ks = dOs + kRows * Dh;  // [kCols][Dh]
  T* Vs = Ks + kCols * Dh;
  T* Pb = Vs + kCols * Dh;  // [kRows][kCols] (P, unused here but written alongside dS)
  T* dSb = Pb + kRows * kCols;
  float* Sf = reinterpret_cast<float*>(dSb + kRows * kCols);
  float* dPf = Sf + kRows * kCols;
  float* dQs = dPf + kRows * kCols;  // [kRows][Dh]
  float* lse_s = dQs + kRows * Dh;
  float* D_s = lse_s + kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t q0 = int64_t(blockIdx.y) * kRows;
  load_rows(Qs, qkv + L.q(b, h), L.ld_qkv, q0, kRows, L.S, Dh, vec);
  load_rows(dOs, dout + L.out(b, h), L.ld_out, q0, kRows, L.S, Dh, vec);
  load_row_stats(L, bh, q0, lse, D, lse_s, D_s);
  for (int e = threadIdx.x; e < kRows * Dh; e += blockDim.x) dQs[e] = 0.0f;
  int64_t first, end;
  key_range(L, o, q0, &first, &end);
  for (int64_t c0 = first; c0 < end; c0 += kCols) {
    __syncthreads();
    load_rows(Ks, qkv + L.k(b, g), L.ld_qkv, c0, kCols, end, Dh, vec);
    load_rows(Vs, qkv + L.v(b, g), L.ld_qkv, c0, kCols, end, Dh, vec);
    __syncthreads();
    product_abt(Qs + warp * 16 * Dh, Ks, Sf + warp * 16 * kCols, Dh);
    product_abt(dOs + warp * 16 * Dh, Vs, dPf + warp * 16 * kCols, Dh);
    __syncwarp();
    probabilities_and_ds(L, o, b, Sf, dPf, Pb, dSb, warp * 16, q0, c0, lse_s, D_s);
    __syncwarp();
    accumulate_ab(dSb + warp * 16 * kCols, Ks, dQs + warp * 16 * Dh, Dh);
  }
  __syncthreads();
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
    const int64_t i = q0 + r;
    if (i >= L.S) break;
    T* dQ = dqkv + L.q(b, h) + i * L.ld_qkv;
    for (int d = lane; d < Dh; d += 32) dQ[d] = from_float<T>(dQs[r * Dh + d] * o.scale);
  }
}

size_t forward_smem(int Dh) {
  return size_t(3 * kRows * Dh + kRows * kCols) * 2 +
         size_t(kRows * kCols + kRows * Dh + 2 * kRows) * 4;
}
size_t dkdv_smem(int Dh) {
  return size_t(4 * kRows * Dh + 2 * kRows * kCols) * 2 +
         size_t(2 * kRows * kCols + 2 * kRows * Dh + 2 * kCols) * 4;
}
size_t dq_smem(int Dh) { return dkdv_smem(Dh) - size_t(kRows * Dh) * 4; }

int max_smem_optin() {
  static const int bytes = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return v;
  }();
  return bytes;
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  MT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

dim3 grid_of(int64_t pairs, int64_t S) {
  MT_CHECK(pairs <= 0x7fffffff && (S + kRows - 1) / kRows <= 65535,
           "flash_attention (CUDA, tensor cores): problem too large for the grid (pairs=", pairs,
           " S=", S, ")");
  return dim3(unsigned(pairs), unsigned((S + kRows - 1) / kRows));
}

}  // namespace

bool runs(const AttentionShape& s, const AttentionOptions& opt, DType dtype) {
  return (dtype == DType::BF16 || dtype == DType::F16) && s.Dh % 16 == 0 && s.Dh >= 16 &&
         s.Dh <= kMaxHeadDim && opt.dropout_p == 0.0f &&
         dkdv_smem(int(s.Dh)) <= size_t(max_smem_optin());
}

template <typename T>
void forward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv, T* out, float* lse,
             cudaStream_t stream) {
  const int Dh = int(s.Dh);
  const size_t smem = forward_smem(Dh);
  allow_smem(forward_kernel<T>, smem);
  forward_kernel<T><<<grid_of(s.B * s.H, s.S), kThreads, smem, stream>>>(
      flash::geo_of(s), flash::opt_of(opt), qkv, out, lse, aligned16(qkv));
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void backward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv, const float* lse,
              const T* dout, const float* D, T* dqkv, cudaStream_t stream) {
  const int Dh = int(s.Dh);
  const Geo L = flash::geo_of(s);
  const Opt o = flash::opt_of(opt);
  const bool vec = aligned16(qkv) && aligned16(dout);
  allow_smem(dkdv_kernel<T>, dkdv_smem(Dh));
  dkdv_kernel<T><<<grid_of(s.B * s.G, s.S), kThreads, dkdv_smem(Dh), stream>>>(L, o, qkv, lse, dout,
                                                                               D, dqkv, vec);
  MT_CUDA_LAUNCH_CHECK();
  allow_smem(dq_kernel<T>, dq_smem(Dh));
  dq_kernel<T><<<grid_of(s.B * s.H, s.S), kThreads, dq_smem(Dh), stream>>>(L, o, qkv, lse, dout, D,
                                                                           dqkv, vec);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                        \
  template void forward<T>(const AttentionShape&, const AttentionOptions&, const T*, T*, float*, \
                           cudaStream_t);                                                        \
  template void backward<T>(const AttentionShape&, const AttentionOptions&, const T*,            \
                            const float*, const T*, const float*, T*, cudaStream_t);
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda::flash_tc
