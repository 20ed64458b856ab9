#include <cmath>

#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_block.h"
#include "kernels/cuda/flash_geometry.cuh"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_max;
using detail::warp_sum;
using flash::Geo;
using flash::geo_of;
using flash::Opt;
using flash::opt_of;

constexpr int kTile = 32;  // keys (forward, dQ) or queries (dK/dV) per shared-memory tile
constexpr int kWarps = 8;  // rows (queries or keys) per block, one warp each
constexpr int kThreads = kWarps * 32;
constexpr int kPerLane = int(kFlashMaxHeadDim / 32);
constexpr unsigned kFull = 0xffffffffu;

// Where the block's rows come from and sit in the global sequence (q.S is the global length:
// masks, segments and dropout indices are indexed by global position).
struct Blk {
  Geo q, kv;       // kv: the fused layout, or packed [rows, B, G, 2, Dh] (a layout with no queries)
  int64_t q0, k0;  // global positions of query row 0 and key row 0
  int64_t Sq, Sk;  // rows of each
  __device__ bool visible(const Opt& o, int64_t iq, int64_t jg) const {
    return (!o.causal || jg <= iq) && (o.window <= 0 || iq - jg < o.window);
  }
  // Keys (local) that query rows [r0, r0 + rows) can see at most: [key_begin, key_end).
  __device__ int64_t key_end(const Opt& o, int64_t r0, int64_t rows) const {
    if (!o.causal) return Sk;
    const int64_t e = q0 + r0 + rows - k0;
    return e < 0 ? 0 : (e > Sk ? Sk : e);
  }
  __device__ int64_t key_begin(const Opt& o, int64_t r0) const {
    const int64_t b = o.window > 0 ? q0 + r0 - o.window + 1 - k0 : 0;
    return b > 0 ? b : 0;
  }
  // Queries (local) that key rows [c0, c0 + rows) can be seen by: [query_begin, query_end).
  __device__ int64_t query_begin(const Opt& o, int64_t c0) const {
    const int64_t b = o.causal ? k0 + c0 - q0 : 0;
    return b > 0 ? b : 0;
  }
  __device__ int64_t query_end(const Opt& o, int64_t c0, int64_t rows) const {
    if (o.window <= 0) return Sq;
    const int64_t e = k0 + c0 + rows - 1 + o.window - q0;
    return e < 0 ? 0 : (e > Sq ? Sq : e);
  }
};

Blk blk_of(const AttentionShape& s, const AttentionBlock& b) {
  AttentionShape packed = s;
  packed.H = 0;  // each group only its key and value head
  return Blk{geo_of(s), geo_of(b.kv_packed ? packed : s), b.q_start, b.k_start, b.q_rows, b.k_rows};
}

__device__ __forceinline__ float drop(float prob, const Opt& o, uint64_t index) {
  return philox::uniform(o.seed, o.stream, index) >= o.p ? prob * o.keep_scale : 0.0f;
}

// The score of a visible pair: scaled and, with a cap, soft-capped; *grad the cap's derivative.
__device__ __forceinline__ float score(float dot, const Opt& o, float* grad) {
  float s = dot * o.scale;
  if (o.softcap > 0.0f) {
    const float t = tanhf(s / o.softcap);
    s = o.softcap * t;
    if (grad) *grad = 1.0f - t * t;
  } else if (grad) {
    *grad = 1.0f;
  }
  return s;
}

// Loads rows [r0, r0 + rows) (zeros past `valid`) of a strided [*, Dh] matrix into shared memory.
template <typename T>
__device__ void load_tile(float* dst, int ld, const T* src, int64_t src_ld, int64_t r0, int rows,
                          int64_t valid, int Dh) {
  for (int e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int r = e / Dh, d = e % Dh;
    dst[r * ld + d] = r0 + r < valid ? to_float(src[(r0 + r) * src_ld + d]) : 0.0f;
  }
}

template <typename T>
__device__ __forceinline__ void add_to(T* p, float v) {
  *p = from_float<T>(to_float(*p) + v);
}

// Forward: block (bh, query tile); warp w takes query row i = tile * kWarps + w.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    block_forward_kernel(Blk B, Opt o, const T* q, const T* kv, T* out, float* lse) {
  extern __shared__ float smem[];
  const Geo &L = B.q, &KV = B.kv;
  const int Dh = int(L.Dh), ldk = Dh + 1;
  float* Ks = smem;              // [kTile][Dh + 1]
  float* Vs = Ks + kTile * ldk;  // [kTile][Dh]
  float* Qs = Vs + kTile * Dh;   // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t r0 = int64_t(blockIdx.y) * kWarps, i = r0 + warp, iq = B.q0 + i;
  const bool active = i < B.Sq;
  const T* K = kv + KV.k(b, g);
  const T* V = kv + KV.v(b, g);
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[iq] : 0;
  load_tile(Qs, Dh, q + L.q(b, h), L.ld_qkv, r0, kWarps, B.Sq, Dh);
  const float* qr = Qs + warp * Dh;
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t kend = B.key_end(o, r0, kWarps);
  const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(iq * L.S) : 0;
  for (int64_t c0 = B.key_begin(o, r0); c0 < kend; c0 += kTile) {
    const int cols = int(kend - c0 < kTile ? kend - c0 : kTile);
    __syncthreads();  // the previous tile is consumed (and Qs is loaded)
    load_tile(Ks, ldk, K, KV.ld_qkv, c0, kTile, kend, Dh);
    load_tile(Vs, Dh, V, KV.ld_qkv, c0, kTile, kend, Dh);
    __syncthreads();
    if (!active) continue;
    const int64_t jg = B.k0 + c0 + lane;
    const bool vis =
        lane < cols && B.visible(o, iq, jg) && (!km || km[jg]) && (!sg || sg[jg] == own);
    float s = -INFINITY;
    if (vis) {
      float dot = 0.0f;
      for (int d = 0; d < Dh; ++d) dot += qr[d] * Ks[lane * ldk + d];
      s = score(dot, o, nullptr);
    }
    const float mx = fmaxf(m, warp_max(s));
    if (mx == -INFINITY) continue;  // nothing visible yet
    const float alpha = m == -INFINITY ? 0.0f : math::exp_approx(m - mx);
    float pj = vis ? math::exp_approx(s - mx) : 0.0f;
    l = l * alpha + warp_sum(pj);
    m = mx;
    if (o.dropout && vis) pj = drop(pj, o, base + uint64_t(jg));
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
  if (lane == 0) lse[bh * B.Sq + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// D[bh, i] = sum_d dout * out over `rows` query rows, one warp per row.
template <typename T>
__global__ void rowdot_kernel(Geo L, int64_t rows, const T* out, const T* dout, float* D) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= L.B * L.H * rows) return;
  const int64_t bh = row / rows, i = row % rows, b = bh / L.H, h = bh % L.H;
  const int64_t off = L.out(b, h) + i * L.ld_out;
  float dot = 0.0f;
  for (int64_t d = lane; d < L.Dh; d += 32) dot += to_float(out[off + d]) * to_float(dout[off + d]);
  dot = warp_sum(dot);
  if (lane == 0) D[row] = dot;
}

// The recomputed pair (query, key): p, its dropped pv and dS = (pv dPv - p D_i) through the cap.
struct Pair {
  float pv, ds;
};
__device__ __forceinline__ Pair pair_grad(bool vis, const float* q, const float* k, const float* dO,
                                          const float* v, int Dh, float lse_i, float D_i,
                                          const Opt& o, uint64_t index) {
  Pair r{0.0f, 0.0f};
  if (!vis) return r;
  float dot = 0.0f, dpv = 0.0f;
  for (int d = 0; d < Dh; ++d) {
    dot += q[d] * k[d];
    dpv += dO[d] * v[d];
  }
  float cap_grad = 1.0f;
  const float p = math::exp_approx(score(dot, o, &cap_grad) - lse_i);
  r.pv = o.dropout ? drop(p, o, index) : p;
  r.ds = (r.pv * dpv - p * D_i) * cap_grad;
  return r;
}

// dK, dV: block (b*G + g, key tile); warp w takes key j over every head of group g and every
// query tile that can see it, in a fixed order (deterministic, no atomics); adds into dkv.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    block_dkdv_kernel(Blk B, Opt o, const T* q, const T* kv, const float* lse, const T* dout,
                      const float* D, T* dkv) {
  extern __shared__ float smem[];
  const Geo &L = B.q, &KV = B.kv;
  const int Dh = int(L.Dh), ldq = Dh + 1;
  float* Qs = smem;               // [kTile][Dh + 1]
  float* dOs = Qs + kTile * ldq;  // [kTile][Dh + 1]
  float* ks = dOs + kTile * ldq;  // [kWarps][Dh]
  float* vs = ks + kWarps * Dh;   // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bg = blockIdx.x, b = bg / L.G, g = bg % L.G;
  const int64_t c0 = int64_t(blockIdx.y) * kWarps, j = c0 + warp, jg = B.k0 + j;
  const bool active = j < B.Sk;
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const bool key_visible = active && (!km || km[jg]);
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[jg] : 0;
  load_tile(ks, Dh, kv + KV.k(b, g), KV.ld_qkv, c0, kWarps, B.Sk, Dh);
  load_tile(vs, Dh, kv + KV.v(b, g), KV.ld_qkv, c0, kWarps, B.Sk, Dh);
  const float* k = ks + warp * Dh;
  const float* v = vs + warp * Dh;
  float acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc_k[t] = acc_v[t] = 0.0f;
  const int64_t first = B.query_begin(o, c0), qend = B.query_end(o, c0, kWarps);
  for (int64_t h = g * L.hpg; h < (g + 1) * L.hpg; ++h) {
    const int64_t bh = b * L.H + h;
    const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(jg) : 0;
    for (int64_t r0 = first; r0 < qend; r0 += kTile) {
      __syncthreads();
      load_tile(Qs, ldq, q + L.q(b, h), L.ld_qkv, r0, kTile, qend, Dh);
      load_tile(dOs, ldq, dout + L.out(b, h), L.ld_out, r0, kTile, qend, Dh);
      __syncthreads();
      if (!active) continue;
      const int64_t i = r0 + lane, iq = B.q0 + i;
      const float lse_i = i < qend ? lse[bh * B.Sq + i] : -INFINITY;
      const bool vis = key_visible && i < qend && B.visible(o, iq, jg) && lse_i != -INFINITY &&
                       (!sg || sg[iq] == own);
      const Pair pr = pair_grad(vis, Qs + lane * ldq, k, dOs + lane * ldq, v, Dh, lse_i,
                                vis ? D[bh * B.Sq + i] : 0.0f, o, base + uint64_t(iq * L.S));
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
  T* dK = dkv + KV.k(b, g) + j * KV.ld_qkv;
  T* dV = dkv + KV.v(b, g) + j * KV.ld_qkv;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < Dh) {
      add_to(dK + d, acc_k[t] * o.scale);
      add_to(dV + d, acc_v[t]);
    }
  }
}

// dQ: block (bh, query tile); warp w takes query i over the key tiles it can see; adds into dq.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    block_dq_kernel(Blk B, Opt o, const T* q, const T* kv, const float* lse, const T* dout,
                    const float* D, T* dq) {
  extern __shared__ float smem[];
  const Geo &L = B.q, &KV = B.kv;
  const int Dh = int(L.Dh), ldk = Dh + 1;
  float* Ks = smem;               // [kTile][Dh + 1]
  float* Vs = Ks + kTile * ldk;   // [kTile][Dh + 1]
  float* qs = Vs + kTile * ldk;   // [kWarps][Dh]
  float* dos = qs + kWarps * Dh;  // [kWarps][Dh]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x, b = bh / L.H, h = bh % L.H, g = h / L.hpg;
  const int64_t r0 = int64_t(blockIdx.y) * kWarps, i = r0 + warp, iq = B.q0 + i;
  const bool active = i < B.Sq;
  const uint8_t* km = o.key_mask ? o.key_mask + b * L.S : nullptr;
  const int32_t* sg = o.segment_ids ? o.segment_ids + b * L.S : nullptr;
  const int32_t own = sg && active ? sg[iq] : 0;
  load_tile(qs, Dh, q + L.q(b, h), L.ld_qkv, r0, kWarps, B.Sq, Dh);
  load_tile(dos, Dh, dout + L.out(b, h), L.ld_out, r0, kWarps, B.Sq, Dh);
  const float lse_i = active ? lse[bh * B.Sq + i] : -INFINITY;
  const float D_i = active ? D[bh * B.Sq + i] : 0.0f;
  const uint64_t base = o.dropout ? L.dropout_base(b, h) + uint64_t(iq * L.S) : 0;
  float acc[kPerLane];
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) acc[t] = 0.0f;
  const int64_t kend = B.key_end(o, r0, kWarps);
  for (int64_t c0 = B.key_begin(o, r0); c0 < kend; c0 += kTile) {
    const int cols = int(kend - c0 < kTile ? kend - c0 : kTile);
    __syncthreads();
    load_tile(Ks, ldk, kv + KV.k(b, g), KV.ld_qkv, c0, kTile, kend, Dh);
    load_tile(Vs, ldk, kv + KV.v(b, g), KV.ld_qkv, c0, kTile, kend, Dh);
    __syncthreads();
    if (!active || lse_i == -INFINITY) continue;
    const int64_t jg = B.k0 + c0 + lane;
    const bool vis =
        lane < cols && B.visible(o, iq, jg) && (!km || km[jg]) && (!sg || sg[jg] == own);
    const Pair pr = pair_grad(vis, qs + warp * Dh, Ks + lane * ldk, dos + warp * Dh,
                              Vs + lane * ldk, Dh, lse_i, D_i, o, base + uint64_t(jg));
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
  T* dQ = dq + L.q(b, h) + i * L.ld_qkv;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int d = lane + 32 * t;
    if (d < Dh) add_to(dQ + d, acc[t] * o.scale);
  }
}

// One warp per (bh, row): acc <- (acc e^acc_lse + out e^lse) / e^new_lse.
__global__ void merge_kernel(int64_t rows, int64_t B, int64_t H, int64_t Dh, const float* out,
                             const float* lse, float* acc_out, float* acc_lse, int64_t stride) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= B * H * rows) return;
  const int64_t bh = row / rows, i = row % rows, b = bh / H, h = bh % H;
  const float l = lse[bh * rows + i];
  if (l == -INFINITY) return;  // the block gave this row nothing
  float* al = acc_lse + bh * stride + i;
  const float acc_l = *al;
  const float* o = out + ((i * B + b) * H + h) * Dh;
  float* a = acc_out + ((i * B + b) * H + h) * Dh;
  float next = l, ca = 0.0f, cb = 1.0f;
  if (acc_l != -INFINITY) {
    const float mx = fmaxf(acc_l, l);
    const float wa = expf(acc_l - mx), wb = expf(l - mx), sum = wa + wb;
    ca = wa / sum;
    cb = wb / sum;
    next = mx + logf(sum);
  }
  for (int64_t d = lane; d < Dh; d += 32) a[d] = acc_l == -INFINITY ? o[d] : a[d] * ca + o[d] * cb;
  __syncwarp();
  if (lane == 0) *al = next;
}

size_t forward_smem(int64_t Dh) { return size_t(kTile * (2 * Dh + 1) + kWarps * Dh) * 4; }
size_t backward_smem(int64_t Dh) { return size_t(2 * kTile * (Dh + 1) + 2 * kWarps * Dh) * 4; }

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    MT_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

dim3 grid_of(int64_t pairs, int64_t rows) {
  MT_CHECK(pairs <= 0x7fffffff && (rows + kWarps - 1) / kWarps <= 65535,
           "flash_block (CUDA): problem too large for the grid (pairs=", pairs, " rows=", rows,
           ")");
  return dim3(unsigned(pairs), unsigned((rows + kWarps - 1) / kWarps));
}

template <typename T>
void check(const AttentionShape& s, const AttentionOptions& opt, const AttentionBlock& b,
           const char* op) {
  const FlashAttentionSupport sup = flash_attention_support(s, opt, detail::dtype_of<T>());
  MT_CHECK(sup.supported, op, ": ", sup.reason);
  MT_CHECK(opt.softcap >= 0.0f, op, ": softcap ", opt.softcap, " < 0");
  MT_CHECK(b.q_start >= 0 && b.q_rows >= 0 && b.q_start + b.q_rows <= s.S && b.k_start >= 0 &&
               b.k_rows >= 0 && b.k_start + b.k_rows <= s.S,
           op, ": block rows q [", b.q_start, ", ", b.q_start + b.q_rows, ") k [", b.k_start, ", ",
           b.k_start + b.k_rows, ") outside a sequence of ", s.S);
}

}  // namespace

size_t flash_block_backward_workspace_bytes(const AttentionShape& s, const AttentionBlock& b) {
  return size_t(s.B * s.H * b.q_rows) * sizeof(float);  // D
}

template <typename T>
void flash_block_forward(const AttentionShape& s, const AttentionOptions& opt,
                         const AttentionBlock& block, const T* q, const T* kv, T* out, float* lse,
                         cudaStream_t stream) {
  check<T>(s, opt, block, "flash_block_forward");
  if (block.q_rows == 0 || s.B == 0 || s.H == 0) return;
  const size_t smem = forward_smem(s.Dh);
  allow_smem(block_forward_kernel<T>, smem);
  block_forward_kernel<T><<<grid_of(s.B * s.H, block.q_rows), kThreads, smem, stream>>>(
      blk_of(s, block), opt_of(opt), q, kv, out, lse);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void flash_block_backward(const AttentionShape& s, const AttentionOptions& opt,
                          const AttentionBlock& block, const T* q, const T* kv, const T* out,
                          const float* lse, const T* dout, T* dq, T* dkv, void* workspace,
                          cudaStream_t stream) {
  check<T>(s, opt, block, "flash_block_backward");
  if (block.q_rows == 0 || block.k_rows == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(workspace != nullptr, "flash_block_backward (CUDA): no workspace (need ",
           flash_block_backward_workspace_bytes(s, block), " bytes)");
  float* D = static_cast<float*>(workspace);
  const Blk B = blk_of(s, block);
  const Opt o = opt_of(opt);
  flash_row_dots(s, block.q_rows, out, dout, D, stream);
  const size_t smem = backward_smem(s.Dh);
  allow_smem(block_dkdv_kernel<T>, smem);
  block_dkdv_kernel<T><<<grid_of(s.B * s.G, block.k_rows), kThreads, smem, stream>>>(
      B, o, q, kv, lse, dout, D, dkv);
  MT_CUDA_LAUNCH_CHECK();
  allow_smem(block_dq_kernel<T>, smem);
  block_dq_kernel<T>
      <<<grid_of(s.B * s.H, block.q_rows), kThreads, smem, stream>>>(B, o, q, kv, lse, dout, D, dq);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void flash_row_dots(const AttentionShape& s, int64_t rows, const T* out, const T* dout, float* D,
                    cudaStream_t stream) {
  const int64_t n = s.B * s.H * rows;
  if (n == 0) return;
  MT_CHECK((n + kWarps - 1) / kWarps <= 0x7fffffff, "flash_row_dots (CUDA): ", n, " rows");
  rowdot_kernel<T>
      <<<unsigned((n + kWarps - 1) / kWarps), kThreads, 0, stream>>>(geo_of(s), rows, out, dout, D);
  MT_CUDA_LAUNCH_CHECK();
}

void flash_block_merge(int64_t rows, int64_t B, int64_t H, int64_t Dh, const float* out,
                       const float* lse, float* acc_out, float* acc_lse, int64_t acc_lse_stride,
                       cudaStream_t stream) {
  const int64_t n = rows * B * H;
  if (n == 0) return;
  MT_CHECK((n + kWarps - 1) / kWarps <= 0x7fffffff, "flash_block_merge (CUDA): ", n, " rows");
  merge_kernel<<<unsigned((n + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      rows, B, H, Dh, out, lse, acc_out, acc_lse, acc_lse_stride);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                     \
  template void flash_block_forward<T>(const AttentionShape&, const AttentionOptions&,        \
                                       const AttentionBlock&, const T*, const T*, T*, float*, \
                                       cudaStream_t);                                         \
  template void flash_block_backward<T>(const AttentionShape&, const AttentionOptions&,       \
                                        const AttentionBlock&, const T*, const T*, const T*,  \
                                        const float*, const T*, T*, T*, void*, cudaStream_t); \
  template void flash_row_dots<T>(const AttentionShape&, int64_t, const T*, const T*, float*, \
                                  cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
