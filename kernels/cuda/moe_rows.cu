#include "kernels/cuda/common.cuh"
#include "kernels/cuda/moe_rows.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 4;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(n < kMaxBlocks ? n : kMaxBlocks); }

// One block per output row (grid-stride), threads over the row's words.
template <typename W>
__global__ void gather_rows_kernel(const W* __restrict__ src, int64_t src_rows,
                                   const int32_t* __restrict__ index, int64_t n, int64_t words,
                                   W* __restrict__ out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t r = index[i];
    W* o = out + i * words;
    if (r >= 0 && r < src_rows) {
      const W* s = src + r * words;
      for (int64_t j = threadIdx.x; j < words; j += blockDim.x) o[j] = s[j];
    } else {
      for (int64_t j = threadIdx.x; j < words; j += blockDim.x) o[j] = W{};
    }
  }
}

// One block per source row.
template <typename W>
__global__ void scatter_rows_kernel(const W* __restrict__ src, const int32_t* __restrict__ index,
                                    int64_t n, int64_t out_rows, int64_t words,
                                    W* __restrict__ out) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int64_t r = index[i];
    if (r < 0 || r >= out_rows) continue;
    const W* s = src + i * words;
    W* o = out + r * words;
    for (int64_t j = threadIdx.x; j < words; j += blockDim.x) o[j] = s[j];
  }
}

// The widest word (16, 8, 4, 2 or 1 bytes) dividing the row size and both addresses, then
// fn(word type, words per row).
template <typename Fn>
void with_word(const void* a, const void* b, size_t row_bytes, Fn&& fn) {
  const size_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | row_bytes;
  if (bits % 16 == 0) return fn(uint4{}, row_bytes / 16);
  if (bits % 8 == 0) return fn(uint2{}, row_bytes / 8);
  if (bits % 4 == 0) return fn(uint32_t{}, row_bytes / 4);
  if (bits % 2 == 0) return fn(uint16_t{}, row_bytes / 2);
  fn(uint8_t{}, row_bytes);
}

// One block per token, threads over the columns; slots in order.
template <typename T, typename OutT>
__global__ void moe_combine_kernel(const T* __restrict__ rows, int64_t n_rows,
                                   const int32_t* __restrict__ index,
                                   const float* __restrict__ gates, int64_t tokens, int64_t k,
                                   int64_t dim, OutT* __restrict__ out) {
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x)
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t slot = t * k + j;
        const int64_t r = index != nullptr ? index[slot] : slot;
        if (r < 0 || r >= n_rows) continue;
        const float x = to_float(rows[r * dim + d]);
        acc = gates != nullptr ? fmaf(gates[slot], x, acc) : acc + x;
      }
      out[t * dim + d] = from_float<OutT>(acc);
    }
}

// One block per slot: the row's gradient and the gate's (an fp64 block sum).
template <typename T>
__global__ void moe_combine_backward_kernel(const T* __restrict__ rows,
                                            const float* __restrict__ gates,
                                            const T* __restrict__ dy, int64_t slots, int64_t k,
                                            int64_t dim, T* __restrict__ d_rows,
                                            float* __restrict__ d_gates) {
  __shared__ double scratch[detail::kWarp];
  for (int64_t i = blockIdx.x; i < slots; i += gridDim.x) {
    const T* g_out = dy + (i / k) * dim;
    const float g = gates[i];
    double dot = 0.0;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      const float gy = to_float(g_out[d]);
      dot += static_cast<double>(gy) * static_cast<double>(to_float(rows[i * dim + d]));
      d_rows[i * dim + d] = from_float<T>(__fmul_rn(g, gy));
    }
    dot = detail::block_sum(dot, scratch);
    if (threadIdx.x == 0) d_gates[i] = static_cast<float>(dot);
  }
}

}  // namespace

void gather_rows(const void* src, int64_t src_rows, const int32_t* index, int64_t n,
                 size_t row_bytes, void* out, cudaStream_t stream) {
  if (n <= 0 || row_bytes == 0) return;
  with_word(src, out, row_bytes, [&](auto word, size_t words) {
    using W = decltype(word);
    gather_rows_kernel<W>
        <<<blocks_for(n), detail::row_threads(int64_t(words), kThreads), 0, stream>>>(
            static_cast<const W*>(src), src_rows, index, n, int64_t(words), static_cast<W*>(out));
  });
  MT_CUDA_LAUNCH_CHECK();
}

void scatter_rows(const void* src, const int32_t* index, int64_t n, int64_t out_rows,
                  size_t row_bytes, void* out, cudaStream_t stream) {
  if (n <= 0 || row_bytes == 0) return;
  with_word(src, out, row_bytes, [&](auto word, size_t words) {
    using W = decltype(word);
    scatter_rows_kernel<W>
        <<<blocks_for(n), detail::row_threads(int64_t(words), kThreads), 0, stream>>>(
            static_cast<const W*>(src), index, n, out_rows, int64_t(words), static_cast<W*>(out));
  });
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename OutT>
void moe_combine(const T* rows, int64_t n_rows, const int32_t* index, const float* gates,
                 int64_t tokens, int64_t topk, int64_t dim, OutT* out, cudaStream_t stream) {
  if (tokens <= 0 || dim <= 0) return;
  moe_combine_kernel<T, OutT>
      <<<blocks_for(tokens), detail::row_threads(dim, kThreads), 0, stream>>>(
          rows, n_rows, index, gates, tokens, topk, dim, out);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void moe_combine_backward(const T* rows, const float* gates, const T* dy, int64_t tokens,
                          int64_t topk, int64_t dim, T* d_rows, float* d_gates,
                          cudaStream_t stream) {
  const int64_t slots = tokens * topk;
  if (slots <= 0) return;
  moe_combine_backward_kernel<T>
      <<<blocks_for(slots), detail::row_threads(dim, kThreads), 0, stream>>>(
          rows, gates, dy, slots, topk, dim, d_rows, d_gates);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE_COMBINE(T, OutT)                                                        \
  template void moe_combine<T, OutT>(const T*, int64_t, const int32_t*, const float*, int64_t, \
                                     int64_t, int64_t, OutT*, cudaStream_t);
#define MT_INSTANTIATE(T)                                                                   \
  MT_INSTANTIATE_COMBINE(T, T)                                                              \
  template void moe_combine_backward<T>(const T*, const float*, const T*, int64_t, int64_t, \
                                        int64_t, T*, float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
MT_INSTANTIATE_COMBINE(__nv_bfloat16, float)
MT_INSTANTIATE_COMBINE(__half, float)
#undef MT_INSTANTIATE
#undef MT_INSTANTIATE_COMBINE

}  // namespace megatron::kernels::cuda
