#include "kernels/common/philox.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dropout.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 256;

// One thread per Philox block: global indices 4k .. 4k+3 share one philox4x32_10 evaluation,
// exactly the words philox::uniform would give each of them.
template <typename T>
__global__ void dropout_kernel(const T* in, T* out, int64_t n, float p, float keep_scale,
                               uint64_t seed, uint64_t rng_stream, uint64_t index_offset) {
  const uint64_t first_block = index_offset >> 2;
  const uint64_t last_block = (index_offset + uint64_t(n) - 1) >> 2;
  const uint64_t blocks = last_block - first_block + 1;
  for (uint64_t k = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; k < blocks;
       k += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t block = first_block + k;
    const philox::U32x4 r = philox::random_block(seed, rng_stream, block);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t g = block * 4 + uint64_t(w);
      if (g < index_offset || g >= index_offset + uint64_t(n)) continue;
      const int64_t i = int64_t(g - index_offset);
      const float u = philox::to_unit_float(r.v[w]);
      out[i] = from_float<T>(u >= p ? to_float(in[i]) * keep_scale : 0.0f);
    }
  }
}

// Thread k handles Philox block j = k % per_row of row r = k / per_row: the blocks covering the
// row's indices [base, base + D), however base is aligned.
template <typename T>
__global__ void dropout_rows_kernel(const T* in, T* out, DropoutRows rows, int64_t per_row, float p,
                                    float keep_scale, uint64_t seed, uint64_t rng_stream) {
  const int64_t total = rows.rows() * per_row, D = rows.D;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / per_row, j = k % per_row;
    const uint64_t base = rows.row_index(r);
    const uint64_t block = (base >> 2) + uint64_t(j);
    if (block * 4 >= base + uint64_t(D)) continue;
    const philox::U32x4 rnd = philox::random_block(seed, rng_stream, block);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const uint64_t g = block * 4 + uint64_t(w);
      if (g < base || g >= base + uint64_t(D)) continue;
      const int64_t i = r * D + int64_t(g - base);
      const float u = philox::to_unit_float(rnd.v[w]);
      out[i] = from_float<T>(u >= p ? to_float(in[i]) * keep_scale : 0.0f);
    }
  }
}

template <typename T>
__global__ void copy_kernel(const T* in, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

// The cases without random masks: nothing to do (n <= 0), or p <= 0, a copy (none in place).
// Returns whether it handled the call.
template <typename T>
bool without_masks(const T* in, T* out, int64_t n, float p, cudaStream_t stream) {
  if (n <= 0) return true;
  if (p > 0.0f) return false;
  if (in != out) {
    copy_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream>>>(in, out, n);
    MT_CUDA_LAUNCH_CHECK();
  }
  return true;
}

float keep_scale_of(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

template <typename T>
void apply(const T* in, T* out, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
           uint64_t index_offset, cudaStream_t stream) {
  if (without_masks(in, out, n, p, stream)) return;
  const float keep_scale = keep_scale_of(p);
  const int64_t blocks = int64_t(((index_offset + uint64_t(n) - 1) >> 2) - (index_offset >> 2) + 1);
  dropout_kernel<<<detail::grid_for(blocks, kThreads), kThreads, 0, stream>>>(
      in, out, n, p, keep_scale, seed, rng_stream, index_offset);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                     uint64_t index_offset, cudaStream_t stream) {
  apply(x, y, n, p, seed, rng_stream, index_offset, stream);
}

template <typename T>
void dropout_backward(const T* dy, T* dx, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                      uint64_t index_offset, cudaStream_t stream) {
  apply(dy, dx, n, p, seed, rng_stream, index_offset, stream);
}

template <typename T>
void dropout_rows(const T* in, T* out, const DropoutRows& rows, float p, uint64_t seed,
                  uint64_t rng_stream, cudaStream_t stream) {
  if (without_masks(in, out, rows.rows() * rows.D, p, stream)) return;
  const float keep_scale = keep_scale_of(p);
  const int64_t per_row = rows.D / 4 + 2;  // blocks touching D indices from any alignment
  dropout_rows_kernel<<<detail::grid_for(rows.rows() * per_row, kThreads), kThreads, 0, stream>>>(
      in, out, rows, per_row, p, keep_scale, seed, rng_stream);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                       \
  template void dropout_forward<T>(const T*, T*, int64_t, float, uint64_t, uint64_t, uint64_t,  \
                                   cudaStream_t);                                               \
  template void dropout_backward<T>(const T*, T*, int64_t, float, uint64_t, uint64_t, uint64_t, \
                                    cudaStream_t);                                              \
  template void dropout_rows<T>(const T*, T*, const DropoutRows&, float, uint64_t, uint64_t,    \
                                cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
