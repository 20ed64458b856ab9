#include "kernels/cuda/common.cuh"
#include "kernels/cuda/qk_projection.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_sum;

constexpr int kTokensPerBlock = 8;    // one warp per token
constexpr int64_t kChunkTokens = 64;  // tokens per partial sum of the weight gradients
constexpr int kParamThreads = 256;

// Element e of part 0 (queries: e < local_q) or part 1 (keys: e < local_k) of a token's row: its
// offset in the row (the weight's index is e itself).
__device__ __forceinline__ int64_t offset_of(const QkProjection& p, int part, int64_t e) {
  const int64_t Dh = p.head_dim, slots = p.q_slots + 2;
  if (part == 0) {
    const int64_t per_group = p.q_slots * Dh, g = e / per_group;
    return g * slots * Dh + e % per_group;
  }
  const int64_t g = e / Dh;
  return (g * slots + p.q_slots) * Dh + e % Dh;
}
__device__ __forceinline__ int64_t part_width(const QkProjection& p, int part) {
  return part == 0 ? p.local_q() : p.local_k();
}

template <typename T, typename W>
__global__ void sums_kernel(const T* x, const T* dy, const W* wq, const W* wk, float* sums,
                            QkProjection p) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (t >= p.tokens) return;
  const T* xr = x + t * p.row();
  for (int part = 0; part < 2; ++part) {
    const W* w = part == 0 ? wq : wk;
    float acc = 0.0f;
    for (int64_t e = lane; e < part_width(p, part); e += detail::kWarp) {
      const int64_t off = offset_of(p, part, e);
      const float v = to_float(xr[off]);
      acc += dy == nullptr ? v * v : to_float(dy[t * p.row() + off]) * to_float(w[e]) * v;
    }
    acc = warp_sum(acc);
    if (lane == 0) sums[2 * t + part] = acc;
  }
}

template <typename T>
__device__ void copy_values(const T* src, T* dst, const QkProjection& p, int lane) {
  const int64_t Dh = p.head_dim, slots = p.q_slots + 2;
  for (int64_t e = lane; e < p.groups * Dh; e += detail::kWarp) {
    const int64_t at = ((e / Dh) * slots + p.q_slots + 1) * Dh + e % Dh;
    dst[at] = src[at];
  }
}

template <typename T, typename W>
__global__ void forward_kernel(const T* x, const W* wq, const W* wk, const float* sums, T* y,
                               float* rstd, QkProjection p) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (t >= p.tokens) return;
  const T* xr = x + t * p.row();
  T* yr = y + t * p.row();
  for (int part = 0; part < 2; ++part) {
    const float width = float(part == 0 ? p.q_width : p.k_width);
    const float rs = 1.0f / sqrtf(sums[2 * t + part] / width + p.eps);
    if (lane == 0) rstd[2 * t + part] = rs;
    const W* w = part == 0 ? wq : wk;
    for (int64_t e = lane; e < part_width(p, part); e += detail::kWarp) {
      const int64_t off = offset_of(p, part, e);
      yr[off] = from_float<T>(to_float(xr[off]) * rs * to_float(w[e]));
    }
  }
  copy_values(xr, yr, p, lane);
}

// dx may be dy: each lane reads its elements before it writes them.
template <typename T, typename W>
__global__ void dx_kernel(const T* x, const W* wq, const W* wk, const float* rstd,
                          const float* dots, const T* dy, T* dx, QkProjection p) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (t >= p.tokens) return;
  const T* xr = x + t * p.row();
  const T* dyr = dy + t * p.row();
  T* dxr = dx + t * p.row();
  for (int part = 0; part < 2; ++part) {
    const float width = float(part == 0 ? p.q_width : p.k_width);
    const float rs = rstd[2 * t + part], b = rs * rs * rs * dots[2 * t + part] / width;
    const W* w = part == 0 ? wq : wk;
    for (int64_t e = lane; e < part_width(p, part); e += detail::kWarp) {
      const int64_t off = offset_of(p, part, e);
      dxr[off] = from_float<T>(rs * to_float(w[e]) * to_float(dyr[off]) - to_float(xr[off]) * b);
    }
  }
  copy_values(dyr, dxr, p, lane);
}

// Pass 1: block (c, e-tile) sums dy x rstd of tokens [c * kChunkTokens, ...) in order into
// partial[c][e], e over the query then the key weights.
template <typename T>
__global__ void param_partial_kernel(const T* x, const float* rstd, const T* dy, float* partial,
                                     QkProjection p) {
  const int64_t nq = p.local_q(), n = nq + p.local_k();
  const int64_t e = int64_t(blockIdx.y) * kParamThreads + threadIdx.x, c = blockIdx.x;
  if (e >= n) return;
  const int part = e < nq ? 0 : 1;
  const int64_t off = offset_of(p, part, part == 0 ? e : e - nq);
  const int64_t t0 = c * kChunkTokens,
                t1 = t0 + kChunkTokens < p.tokens ? t0 + kChunkTokens : p.tokens;
  float acc = 0.0f;
  for (int64_t t = t0; t < t1; ++t)
    acc += to_float(dy[t * p.row() + off]) * to_float(x[t * p.row() + off]) * rstd[2 * t + part];
  partial[c * n + e] = acc;
}

// Pass 2: dwq/dwk[e] += the chunks' partials in order.
__global__ void param_final_kernel(const float* partial, float* dwq, float* dwk, int64_t chunks,
                                   int64_t nq, int64_t n) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c * n + e];
  if (e < nq)
    dwq[e] += s;
  else
    dwk[e - nq] += s;
}

int64_t chunks_for(const QkProjection& p) { return (p.tokens + kChunkTokens - 1) / kChunkTokens; }
unsigned token_blocks(const QkProjection& p) {
  MT_CHECK((p.tokens + kTokensPerBlock - 1) / kTokensPerBlock <= 0x7fffffff,
           "qk_projection (CUDA): ", p.tokens, " tokens");
  return unsigned((p.tokens + kTokensPerBlock - 1) / kTokensPerBlock);
}
constexpr int kTokenThreads = kTokensPerBlock * detail::kWarp;

}  // namespace

size_t qk_projection_backward_workspace_bytes(const QkProjection& p) {
  return size_t(chunks_for(p) * (p.local_q() + p.local_k())) * sizeof(float);
}

template <typename T, typename W>
void qk_projection_sums(const T* x, const T* dy, const W* wq, const W* wk, float* sums,
                        const QkProjection& p, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  sums_kernel<T, W><<<token_blocks(p), kTokenThreads, 0, stream>>>(x, dy, wq, wk, sums, p);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename W>
void qk_projection_norm_forward(const T* x, const W* wq, const W* wk, const float* sums, T* y,
                                float* rstd, const QkProjection& p, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  forward_kernel<T, W><<<token_blocks(p), kTokenThreads, 0, stream>>>(x, wq, wk, sums, y, rstd, p);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename W>
void qk_projection_norm_backward(const T* x, const W* wq, const W* wk, const float* rstd,
                                 const float* dots, const T* dy, T* dx, float* dwq, float* dwk,
                                 const QkProjection& p, void* workspace, cudaStream_t stream) {
  if (p.tokens <= 0) return;
  MT_CHECK(workspace != nullptr, "qk_projection_norm_backward (CUDA): no workspace (need ",
           qk_projection_backward_workspace_bytes(p), " bytes)");
  const int64_t chunks = chunks_for(p), nq = p.local_q(), n = nq + p.local_k();
  MT_CHECK(chunks <= 0x7fffffff && (n + kParamThreads - 1) / kParamThreads <= 65535,
           "qk_projection_norm_backward (CUDA): ", p.tokens, " tokens of ", n, " weights");
  // Weight gradients first: dx may overwrite dy.
  float* partial = static_cast<float*>(workspace);
  const dim3 grid(unsigned(chunks), unsigned((n + kParamThreads - 1) / kParamThreads));
  param_partial_kernel<T><<<grid, kParamThreads, 0, stream>>>(x, rstd, dy, partial, p);
  MT_CUDA_LAUNCH_CHECK();
  param_final_kernel<<<unsigned((n + kParamThreads - 1) / kParamThreads), kParamThreads, 0,
                       stream>>>(partial, dwq, dwk, chunks, nq, n);
  MT_CUDA_LAUNCH_CHECK();
  dx_kernel<T, W><<<token_blocks(p), kTokenThreads, 0, stream>>>(x, wq, wk, rstd, dots, dy, dx, p);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T, W)                                                                     \
  template void qk_projection_sums<T, W>(const T*, const T*, const W*, const W*, float*,         \
                                         const QkProjection&, cudaStream_t);                     \
  template void qk_projection_norm_forward<T, W>(const T*, const W*, const W*, const float*, T*, \
                                                 float*, const QkProjection&, cudaStream_t);     \
  template void qk_projection_norm_backward<T, W>(const T*, const W*, const W*, const float*,    \
                                                  const float*, const T*, T*, float*, float*,    \
                                                  const QkProjection&, void*, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
MT_INSTANTIATE(__nv_bfloat16, float)
MT_INSTANTIATE(__half, __half)
MT_INSTANTIATE(__half, float)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
