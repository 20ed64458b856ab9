#include "kernels/cuda/common.cuh"
#include "kernels/cuda/embedding.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;
constexpr int64_t kMaxBackwardBlocks = 2048;

// One block per token (grid-stride over tokens), threads over the row.
template <typename T>
__global__ void embedding_forward_kernel(const int32_t* __restrict__ ids, int64_t n_tokens,
                                         const T* __restrict__ table, int64_t vocab_start,
                                         int64_t vocab_rows, int64_t dim, T* __restrict__ out) {
  for (int64_t t = blockIdx.x; t < n_tokens; t += gridDim.x) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    T* o = out + t * dim;
    if (ids[t] >= 0 && row >= 0 && row < vocab_rows) {
      const T* src = table + row * dim;
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) o[j] = src[j];
    } else {
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) o[j] = from_float<T>(0.0f);
    }
  }
}

// Block b owns table rows [b * rows_per_block, (b + 1) * rows_per_block). It walks the tokens in
// tiles of blockDim, compacts the matching tokens of a tile in token order into shared memory,
// then every thread adds those tokens' dout rows into its own columns, in order.
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* __restrict__ ids, int64_t n_tokens,
                                          const T* __restrict__ dout, int64_t vocab_start,
                                          int64_t vocab_rows, int64_t dim, int64_t rows_per_block,
                                          float* __restrict__ dtable) {
  __shared__ int64_t match_token[kThreads];
  __shared__ int64_t match_row[kThreads];
  __shared__ int warp_counts[kThreads / detail::kWarp];
  const int64_t row_lo = blockIdx.x * rows_per_block;
  const int64_t row_hi =
      row_lo + rows_per_block < vocab_rows ? row_lo + rows_per_block : vocab_rows;
  const int lane = threadIdx.x % detail::kWarp, warp = threadIdx.x / detail::kWarp;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += blockDim.x) {
    const int64_t t = t0 + threadIdx.x;
    int64_t row = -1;
    if (t < n_tokens && ids[t] >= 0) row = static_cast<int64_t>(ids[t]) - vocab_start;
    const bool match = row >= row_lo && row < row_hi;
    // Order-preserving compaction: rank within the warp from a ballot, then warp offsets.
    const unsigned ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    int offset = 0, total = 0;
    for (int w = 0; w < int(blockDim.x / detail::kWarp); ++w) {
      if (w < warp) offset += warp_counts[w];
      total += warp_counts[w];
    }
    if (match) {
      const int slot = offset + __popc(ballot & ((1u << lane) - 1u));
      match_token[slot] = t;
      match_row[slot] = row;
    }
    __syncthreads();
    for (int k = 0; k < total; ++k) {
      const T* d = dout + match_token[k] * dim;
      float* drow = dtable + match_row[k] * dim;
      for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) drow[j] += to_float(d[j]);
    }
    __syncthreads();  // before the next tile overwrites the match lists and counts
  }
}

}  // namespace

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n_tokens, const T* table, int64_t vocab_start,
                       int64_t vocab_rows, int64_t dim, T* out, cudaStream_t stream) {
  if (n_tokens <= 0 || dim <= 0) return;
  const unsigned blocks = static_cast<unsigned>(n_tokens < 65535 * 4 ? n_tokens : 65535 * 4);
  embedding_forward_kernel<<<blocks, detail::row_threads(dim, kThreads), 0, stream>>>(
      ids, n_tokens, table, vocab_start, vocab_rows, dim, out);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void embedding_backward(const int32_t* ids, int64_t n_tokens, const T* dout, int64_t vocab_start,
                        int64_t vocab_rows, int64_t dim, float* dtable, cudaStream_t stream) {
  if (n_tokens <= 0 || dim <= 0 || vocab_rows <= 0) return;
  const int64_t rows_per_block = (vocab_rows + kMaxBackwardBlocks - 1) / kMaxBackwardBlocks;
  const int64_t blocks = (vocab_rows + rows_per_block - 1) / rows_per_block;
  embedding_backward_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      ids, n_tokens, dout, vocab_start, vocab_rows, dim, rows_per_block, dtable);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                          \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, \
                                     T*, cudaStream_t);                                            \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t,         \
                                      int64_t, float*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
