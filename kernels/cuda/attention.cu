#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/common.cuh"

namespace megatron::kernels::cuda {
namespace {

using detail::Carver;
using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

void check_shape(const AttentionShape& s, const AttentionOptions& opt) {
  MT_CHECK(s.S >= 0 && s.B >= 0 && s.Dh > 0 && s.G > 0 && s.H % s.G == 0,
           "attention: bad shape S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G, " Dh=", s.Dh);
  MT_CHECK(opt.dropout_p >= 0.0f && opt.dropout_p < 1.0f, "attention: dropout_p ", opt.dropout_p,
           " outside [0, 1)");
  MT_CHECK(s.B * s.H * s.S <= 0x7fffffff, "attention (CUDA): B*H*S = ", s.B * s.H * s.S,
           " rows exceed the grid");
}

// ---- layout kernels ------------------------------------------------------------------------

// One thread per element of qkv; pack == true writes qkv from q/k/v, else the reverse.
template <typename T, bool pack>
__global__ void qkv_layout_kernel(T* qkv, T* q, T* k, T* v, int64_t S, int64_t B, int64_t G,
                                  int64_t hpg, int64_t Dh) {
  const int64_t per = hpg + 2;
  const int64_t total = S * B * G * per * Dh;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = idx % Dh;
    int64_t rest = idx / Dh;
    const int64_t slot = rest % per;
    rest /= per;
    const int64_t g = rest % G;
    const int64_t sb = rest / G;
    const int64_t s = sb / B, b = sb % B;
    T* other;
    if (slot < hpg)
      other = q + (((b * G + g) * hpg + slot) * S + s) * Dh + d;
    else if (slot == hpg)
      other = k + ((b * G + g) * S + s) * Dh + d;
    else
      other = v + ((b * G + g) * S + s) * Dh + d;
    if (pack)
      qkv[idx] = *other;
    else
      *other = qkv[idx];
  }
}

// x [S, B, H, Dh] <-> y [B, H, S, Dh]; one thread per element of x.
template <typename T, bool to_bhsd>
__global__ void heads_layout_kernel(T* x, T* y, int64_t S, int64_t B, int64_t H, int64_t Dh) {
  const int64_t total = S * B * H * Dh;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = idx % Dh;
    int64_t rest = idx / Dh;
    const int64_t h = rest % H;
    rest /= H;
    const int64_t b = rest % B, s = rest / B;
    T* other = y + ((b * H + h) * S + s) * Dh + d;
    if (to_bhsd)
      *other = x[idx];
    else
      x[idx] = *other;
  }
}

// ---- softmax / dropout kernels over the rows of [B, H, S, S] ---------------------------------

struct DropoutArgs {
  float p, keep_scale;
  uint64_t seed, rng_stream;
  int64_t total_heads, head_offset, batch_offset;
};

__device__ __forceinline__ uint64_t philox_row_base(const DropoutArgs& d, int64_t b, int64_t h,
                                                    int64_t i, int64_t S) {
  return uint64_t((((d.batch_offset + b) * d.total_heads + d.head_offset + h) * S + i) * S);
}

// The dropped (and rescaled) probability of element j of a row whose Philox index is base + j.
__device__ __forceinline__ float dropped(float prob, const DropoutArgs& d, uint64_t base,
                                         int64_t j) {
  if (d.p <= 0.0f) return prob;
  if (prob == 0.0f) return 0.0f;  // masked or underflowed: 0 whatever the mask says
  return philox::uniform(d.seed, d.rng_stream, base + uint64_t(j)) >= d.p ? prob * d.keep_scale
                                                                          : 0.0f;
}

// In place on the scaled scores of row (b, h, i): masked softmax into probs (fp32), and when pd
// is set the dropped probabilities in T for the P @ V product.
template <typename T>
__global__ void attention_softmax_kernel(float* probs, T* pd, int64_t S, int64_t H, bool causal,
                                         int64_t window, const uint8_t* key_mask,
                                         const int32_t* segment_ids, DropoutArgs d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t i = row % S, bh = row / S, h = bh % H, b = bh / H;
  float* P = probs + row * S;
  const uint8_t* km = key_mask ? key_mask + b * S : nullptr;
  const int32_t* sg = segment_ids ? segment_ids + b * S : nullptr;
  const int32_t own = sg ? sg[i] : 0;
  auto visible = [&](int64_t j) {
    return (window <= 0 || i - j < window) && (!km || km[j]) && (!sg || sg[j] == own);
  };
  int64_t lim = causal ? i + 1 : S;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
    if (visible(j)) mx = fmaxf(mx, P[j]);
  mx = detail::block_max(mx, scratch);
  if (mx == -INFINITY) lim = 0;  // fully masked row
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < lim; j += blockDim.x)
    if (visible(j)) sum += math::exp_approx(P[j] - mx);
  sum = detail::block_sum(sum, scratch);
  const float inv = lim > 0 ? 1.0f / sum : 0.0f;
  const uint64_t base = philox_row_base(d, b, h, i, S);
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) {
    const float val = j < lim && visible(j) ? math::exp_approx(P[j] - mx) * inv : 0.0f;
    P[j] = val;
    if (pd) pd[row * S + j] = from_float<T>(dropped(val, d, base, j));
  }
}

// pd = dropout(probs) in T (backward: the probabilities forward multiplied into V).
template <typename T>
__global__ void attention_dropped_kernel(const float* probs, T* pd, int64_t S, int64_t H,
                                         DropoutArgs d) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % S, bh = row / S, h = bh % H, b = bh / H;
  const uint64_t base = philox_row_base(d, b, h, i, S);
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
    pd[row * S + j] = from_float<T>(dropped(probs[row * S + j], d, base, j));
}

// dS = pv * dPv - P * sum(pv * dPv) per row, with pv the dropped probabilities (recomputed in
// fp32) and dPv = dO V^T: the softmax backward through the dropout (as the CPU kernel).
template <typename T>
__global__ void attention_dscores_kernel(const float* probs, const float* dpv, T* ds, int64_t S,
                                         int64_t H, DropoutArgs d) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t i = row % S, bh = row / S, h = bh % H, b = bh / H;
  const uint64_t base = philox_row_base(d, b, h, i, S);
  const float* P = probs + row * S;
  const float* dP = dpv + row * S;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x) dot += dropped(P[j], d, base, j) * dP[j];
  dot = detail::block_sum(dot, scratch);
  for (int64_t j = threadIdx.x; j < S; j += blockDim.x)
    ds[row * S + j] = from_float<T>(dropped(P[j], d, base, j) * dP[j] - P[j] * dot);
}

DropoutArgs dropout_args(const AttentionShape& s, const AttentionOptions& opt) {
  DropoutArgs d{};
  d.p = opt.dropout_p;
  d.keep_scale = opt.dropout_p > 0.0f ? 1.0f / (1.0f - opt.dropout_p) : 1.0f;
  d.seed = opt.seed;
  d.rng_stream = opt.stream;
  d.total_heads = s.total_heads > 0 ? s.total_heads : s.H;
  d.head_offset = s.head_offset;
  d.batch_offset = s.batch_offset;
  return d;
}

// Strided-batched row-major GEMM over the B * G query groups.
void group_gemm(GemmContext& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                const void* A, int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb,
                float beta, void* C, int64_t ldc, int64_t sc, DType ab, DType c, int64_t batch,
                cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M;
  g.N = N;
  g.K = K;
  g.alpha = alpha;
  g.beta = beta;
  g.A = A;
  g.lda = lda;
  g.stride_a = sa;
  g.B = B;
  g.ldb = ldb;
  g.stride_b = sb;
  g.C = C;
  g.ldc = ldc;
  g.stride_c = sc;
  g.ab_type = ab;
  g.c_type = c;
  g.batch = batch;
  ctx.run(g, stream);
}

template <typename T>
struct FwdBuffers {
  T *q, *k, *v, *pd, *o;
};
template <typename T>
FwdBuffers<T> carve_forward(Carver& c, const AttentionShape& s) {
  FwdBuffers<T> f;
  f.q = c.take<T>(s.B * s.H * s.S * s.Dh);
  f.k = c.take<T>(s.B * s.G * s.S * s.Dh);
  f.v = c.take<T>(s.B * s.G * s.S * s.Dh);
  f.pd = c.take<T>(s.B * s.H * s.S * s.S);
  f.o = c.take<T>(s.B * s.H * s.S * s.Dh);
  return f;
}

template <typename T>
struct BwdBuffers {
  T *q, *k, *v, *dout, *pd, *dq, *dk, *dv;
  float* dp;
};
template <typename T>
BwdBuffers<T> carve_backward(Carver& c, const AttentionShape& s) {
  BwdBuffers<T> f;
  f.q = c.take<T>(s.B * s.H * s.S * s.Dh);
  f.k = c.take<T>(s.B * s.G * s.S * s.Dh);
  f.v = c.take<T>(s.B * s.G * s.S * s.Dh);
  f.dout = c.take<T>(s.B * s.H * s.S * s.Dh);
  f.pd = c.take<T>(s.B * s.H * s.S * s.S);
  f.dp = c.take<float>(s.B * s.H * s.S * s.S);
  f.dq = c.take<T>(s.B * s.H * s.S * s.Dh);
  f.dk = c.take<T>(s.B * s.G * s.S * s.Dh);
  f.dv = c.take<T>(s.B * s.G * s.S * s.Dh);
  return f;
}

// Carver sizes are per element type only through sizeof(T); these stand-ins have the size.
template <size_t N>
struct Bytes {
  char b[N];
};

}  // namespace

size_t attention_forward_workspace_bytes(const AttentionShape& shape, size_t elem_bytes) {
  Carver c(nullptr);
  if (elem_bytes == 2)
    carve_forward<Bytes<2>>(c, shape);
  else
    carve_forward<Bytes<4>>(c, shape);
  return c.bytes();
}

size_t attention_backward_workspace_bytes(const AttentionShape& shape, size_t elem_bytes) {
  Carver c(nullptr);
  if (elem_bytes == 2)
    carve_backward<Bytes<2>>(c, shape);
  else
    carve_backward<Bytes<4>>(c, shape);
  return c.bytes();
}

template <typename T>
void attention_unpack_qkv(const AttentionShape& s, const T* qkv, T* q, T* k, T* v,
                          cudaStream_t stream) {
  const int64_t total = s.S * s.B * (s.H + 2 * s.G) * s.Dh;
  if (total == 0) return;
  qkv_layout_kernel<T, false><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      const_cast<T*>(qkv), q, k, v, s.S, s.B, s.G, s.H / s.G, s.Dh);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_pack_qkv(const AttentionShape& s, const T* q, const T* k, const T* v, T* qkv,
                        cudaStream_t stream) {
  const int64_t total = s.S * s.B * (s.H + 2 * s.G) * s.Dh;
  if (total == 0) return;
  qkv_layout_kernel<T, true><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      qkv, const_cast<T*>(q), const_cast<T*>(k), const_cast<T*>(v), s.S, s.B, s.G, s.H / s.G, s.Dh);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_sbhd_to_bhsd(const AttentionShape& s, const T* x, T* y, cudaStream_t stream) {
  const int64_t total = s.S * s.B * s.H * s.Dh;
  if (total == 0) return;
  heads_layout_kernel<T, true><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      const_cast<T*>(x), y, s.S, s.B, s.H, s.Dh);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_bhsd_to_sbhd(const AttentionShape& s, const T* y, T* x, cudaStream_t stream) {
  const int64_t total = s.S * s.B * s.H * s.Dh;
  if (total == 0) return;
  heads_layout_kernel<T, false><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
      x, const_cast<T*>(y), s.S, s.B, s.H, s.Dh);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void attention_forward(GemmContext& gemm, const AttentionShape& s, const AttentionOptions& opt,
                       const T* qkv, T* out, float* probs, void* workspace, cudaStream_t stream) {
  check_shape(s, opt);
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(workspace != nullptr, "attention_forward (CUDA): no workspace (need ",
           attention_forward_workspace_bytes(s, sizeof(T)), " bytes)");
  Carver carver(workspace);
  const FwdBuffers<T> w = carve_forward<T>(carver, s);
  const int64_t S = s.S, Dh = s.Dh, hpg = s.H / s.G, groups = s.B * s.G;
  constexpr DType kT = detail::dtype_of<T>();
  const bool fp32_no_dropout = kT == DType::F32 && opt.dropout_p <= 0.0f;

  attention_unpack_qkv(s, qkv, w.q, w.k, w.v, stream);
  // scores[hpg*S, S] = scale * Q_group K^T, per group, into probs (fp32).
  group_gemm(gemm, false, true, hpg * S, S, Dh, opt.scale, w.q, Dh, hpg * S * Dh, w.k, Dh, S * Dh,
             0.0f, probs, S, hpg * S * S, kT, DType::F32, groups, stream);
  const DropoutArgs d = dropout_args(s, opt);
  T* pd = fp32_no_dropout ? nullptr : w.pd;
  attention_softmax_kernel<T>
      <<<unsigned(s.B * s.H * S), detail::row_threads(S, kThreads), 0, stream>>>(
          probs, pd, S, s.H, opt.causal, opt.window, opt.key_mask, opt.segment_ids, d);
  MT_CUDA_LAUNCH_CHECK();
  const void* pv = fp32_no_dropout ? static_cast<const void*>(probs) : w.pd;
  // o_group[hpg*S, Dh] = pv_group[hpg*S, S] V
  group_gemm(gemm, false, false, hpg * S, Dh, S, 1.0f, pv, S, hpg * S * S, w.v, Dh, S * Dh, 0.0f,
             w.o, Dh, hpg * S * Dh, kT, kT, groups, stream);
  attention_bhsd_to_sbhd(s, w.o, out, stream);
}

template <typename T>
void attention_backward(GemmContext& gemm, const AttentionShape& s, const AttentionOptions& opt,
                        const T* qkv, const float* probs, const T* dout, T* dqkv, void* workspace,
                        cudaStream_t stream) {
  check_shape(s, opt);
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(workspace != nullptr, "attention_backward (CUDA): no workspace (need ",
           attention_backward_workspace_bytes(s, sizeof(T)), " bytes)");
  Carver carver(workspace);
  const BwdBuffers<T> w = carve_backward<T>(carver, s);
  const int64_t S = s.S, Dh = s.Dh, hpg = s.H / s.G, groups = s.B * s.G;
  constexpr DType kT = detail::dtype_of<T>();
  const bool fp32_no_dropout = kT == DType::F32 && opt.dropout_p <= 0.0f;
  const DropoutArgs d = dropout_args(s, opt);
  const unsigned rows = unsigned(s.B * s.H * S);
  const int threads = detail::row_threads(S, kThreads);

  attention_unpack_qkv(s, qkv, w.q, w.k, w.v, stream);
  attention_sbhd_to_bhsd(s, dout, w.dout, stream);
  const void* pv = probs;
  if (!fp32_no_dropout) {
    attention_dropped_kernel<T><<<rows, threads, 0, stream>>>(probs, w.pd, S, s.H, d);
    MT_CUDA_LAUNCH_CHECK();
    pv = w.pd;
  }
  // dV[S, Dh] = pv_group^T dO_group: the K dimension (hpg*S) sums the group's heads.
  group_gemm(gemm, true, false, S, Dh, hpg * S, 1.0f, pv, S, hpg * S * S, w.dout, Dh, hpg * S * Dh,
             0.0f, w.dv, Dh, S * Dh, kT, kT, groups, stream);
  // dPv[hpg*S, S] = dO_group V^T (fp32)
  group_gemm(gemm, false, true, hpg * S, S, Dh, 1.0f, w.dout, Dh, hpg * S * Dh, w.v, Dh, S * Dh,
             0.0f, w.dp, S, hpg * S * S, kT, DType::F32, groups, stream);
  // dS (reuses the pd buffer: the dV product above has consumed it, in stream order)
  attention_dscores_kernel<T><<<rows, threads, 0, stream>>>(probs, w.dp, w.pd, S, s.H, d);
  MT_CUDA_LAUNCH_CHECK();
  // dQ_group[hpg*S, Dh] = scale * dS_group K;  dK[S, Dh] = scale * dS_group^T Q_group
  group_gemm(gemm, false, false, hpg * S, Dh, S, opt.scale, w.pd, S, hpg * S * S, w.k, Dh, S * Dh,
             0.0f, w.dq, Dh, hpg * S * Dh, kT, kT, groups, stream);
  group_gemm(gemm, true, false, S, Dh, hpg * S, opt.scale, w.pd, S, hpg * S * S, w.q, Dh,
             hpg * S * Dh, 0.0f, w.dk, Dh, S * Dh, kT, kT, groups, stream);
  attention_pack_qkv(s, w.dq, w.dk, w.dv, dqkv, stream);
}

#define MT_INSTANTIATE(T)                                                                          \
  template void attention_forward<T>(GemmContext&, const AttentionShape&, const AttentionOptions&, \
                                     const T*, T*, float*, void*, cudaStream_t);                   \
  template void attention_backward<T>(GemmContext&, const AttentionShape&,                         \
                                      const AttentionOptions&, const T*, const float*, const T*,   \
                                      T*, void*, cudaStream_t);                                    \
  template void attention_unpack_qkv<T>(const AttentionShape&, const T*, T*, T*, T*,               \
                                        cudaStream_t);                                             \
  template void attention_pack_qkv<T>(const AttentionShape&, const T*, const T*, const T*, T*,     \
                                      cudaStream_t);                                               \
  template void attention_sbhd_to_bhsd<T>(const AttentionShape&, const T*, T*, cudaStream_t);      \
  template void attention_bhsd_to_sbhd<T>(const AttentionShape&, const T*, T*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
