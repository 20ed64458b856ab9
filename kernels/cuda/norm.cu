#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/norm_rows.cuh"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_sum;

constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels
constexpr int kChunkRows = 128;   // rows per partial sum of the parameter-grad reduction
constexpr int kTileCols = 32;
constexpr int kRowLanes = 8;

int64_t chunks_for(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

template <typename T, typename W>
__global__ void layernorm_forward_kernel(const T* __restrict__ x, const W* __restrict__ weight,
                                         const W* __restrict__ bias, T* __restrict__ y,
                                         float* __restrict__ mean, float* __restrict__ rstd,
                                         int64_t rows, int64_t D, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (r >= rows) return;
  const T* xr = x + r * D;
  float sum = 0.0f;
  for (int64_t j = lane; j < D; j += detail::kWarp) sum += to_float(xr[j]);
  const float mu = warp_sum(sum) / float(D);
  float sq = 0.0f;  // two passes: no cancellation when |mean| >> std
  for (int64_t j = lane; j < D; j += detail::kWarp) {
    const float d = to_float(xr[j]) - mu;
    sq += d * d;
  }
  const float rs = 1.0f / sqrtf(warp_sum(sq) / float(D) + eps);
  T* yr = y + r * D;
  for (int64_t j = lane; j < D; j += detail::kWarp)
    yr[j] = from_float<T>((to_float(xr[j]) - mu) * rs * to_float(weight[j]) + to_float(bias[j]));
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

template <typename T, typename W>
__global__ void rmsnorm_forward_kernel(const T* __restrict__ x, const W* __restrict__ weight,
                                       T* __restrict__ y, float* __restrict__ rstd, int64_t rows,
                                       int64_t D, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (r >= rows) return;
  const float rs = detail::rms_row_forward(x + r * D, weight, y + r * D, D, eps, lane);
  if (lane == 0) rstd[r] = rs;
}

// dx for one row per warp. mean == nullptr: RMSNorm (no centring, no mean term).
template <typename T, typename W>
__global__ void norm_dx_kernel(const T* __restrict__ x, const W* __restrict__ weight,
                               const float* __restrict__ mean, const float* __restrict__ rstd,
                               const T* __restrict__ dy, T* __restrict__ dx, int64_t rows,
                               int64_t D) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  if (r >= rows) return;
  detail::norm_row_dx(x + r * D, weight, mean != nullptr, mean ? mean[r] : 0.0f, rstd[r],
                      dy + r * D, dx + r * D, D, lane);
}

// Pass 1: block (column tile, row chunk) -> partial_w/partial_b[chunk, col]. Each of the
// kRowLanes row lanes walks its rows in order; the lanes are then added in lane order.
template <typename T>
__global__ void norm_param_partial_kernel(const T* __restrict__ x, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, const T* __restrict__ dy,
                                          float* __restrict__ partial_w,
                                          float* __restrict__ partial_b, int64_t rows, int64_t D) {
  __shared__ float sw[kRowLanes][kTileCols];
  __shared__ float sb[kRowLanes][kTileCols];
  const int tx = threadIdx.x % kTileCols, ty = threadIdx.x / kTileCols;
  const int64_t col = blockIdx.x * int64_t(kTileCols) + tx;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * kChunkRows;
  const int64_t r1 = r0 + kChunkRows < rows ? r0 + kChunkRows : rows;
  float acc_w = 0.0f, acc_b = 0.0f;
  if (col < D) {
    for (int64_t r = r0 + ty; r < r1; r += kRowLanes) {
      const float g = to_float(dy[r * D + col]);
      const float m = mean ? mean[r] : 0.0f;
      acc_w += g * ((to_float(x[r * D + col]) - m) * rstd[r]);
      acc_b += g;
    }
  }
  sw[ty][tx] = acc_w;
  sb[ty][tx] = acc_b;
  __syncthreads();
  if (ty == 0 && col < D) {
    float w = 0.0f, b = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) {
      w += sw[k][tx];
      b += sb[k][tx];
    }
    partial_w[chunk * D + col] = w;
    if (partial_b) partial_b[chunk * D + col] = b;
  }
}

// Pass 2: dweight[col] += sum over chunks in order (and dbias).
__global__ void norm_param_final_kernel(const float* __restrict__ partial_w,
                                        const float* __restrict__ partial_b,
                                        float* __restrict__ dweight, float* __restrict__ dbias,
                                        int64_t chunks, int64_t D) {
  const int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (col >= D) return;
  float w = 0.0f, b = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) {
    w += partial_w[c * D + col];
    if (dbias) b += partial_b[c * D + col];
  }
  dweight[col] += w;
  if (dbias) dbias[col] += b;
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

template <typename T>
void param_grads(const T* x, const float* mean, const float* rstd, const T* dy, float* dweight,
                 float* dbias, int64_t rows, int64_t D, void* workspace, cudaStream_t stream) {
  const int64_t chunks = chunks_for(rows);
  MT_CHECK(workspace != nullptr, "norm backward (CUDA): no workspace (need ",
           norm_backward_workspace_bytes(rows, D), " bytes)");
  MT_CHECK(chunks <= 65535, "norm backward (CUDA): ", rows, " rows exceed the grid");
  float* partial_w = static_cast<float*>(workspace);
  float* partial_b = dbias ? partial_w + chunks * D : nullptr;
  const dim3 grid(static_cast<unsigned>((D + kTileCols - 1) / kTileCols),
                  static_cast<unsigned>(chunks));
  norm_param_partial_kernel<<<grid, kTileCols * kRowLanes, 0, stream>>>(
      x, mean, rstd, dy, partial_w, partial_b, rows, D);
  MT_CUDA_LAUNCH_CHECK();
  norm_param_final_kernel<<<detail::grid_for(D, 256, 1 << 30), 256, 0, stream>>>(
      partial_w, partial_b, dweight, dbias, chunks, D);
  MT_CUDA_LAUNCH_CHECK();
}

}  // namespace

size_t norm_backward_workspace_bytes(int64_t rows, int64_t D) {
  return static_cast<size_t>(2 * chunks_for(rows) * D) * sizeof(float);
}

template <typename T, typename W>
void layernorm_forward(const T* x, const W* weight, const W* bias, T* y, float* mean, float* rstd,
                       int64_t rows, int64_t D, float eps, cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return;
  layernorm_forward_kernel<<<row_blocks(rows), kRowsPerBlock * detail::kWarp, 0, stream>>>(
      x, weight, bias, y, mean, rstd, rows, D, eps);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename W>
void layernorm_backward(const T* x, const W* weight, const float* mean, const float* rstd,
                        const T* dy, T* dx, float* dweight, float* dbias, int64_t rows, int64_t D,
                        void* workspace, cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return;
  norm_dx_kernel<<<row_blocks(rows), kRowsPerBlock * detail::kWarp, 0, stream>>>(
      x, weight, mean, rstd, dy, dx, rows, D);
  MT_CUDA_LAUNCH_CHECK();
  param_grads(x, mean, rstd, dy, dweight, dbias, rows, D, workspace, stream);
}

template <typename T, typename W>
void rmsnorm_forward(const T* x, const W* weight, T* y, float* rstd, int64_t rows, int64_t D,
                     float eps, cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return;
  rmsnorm_forward_kernel<<<row_blocks(rows), kRowsPerBlock * detail::kWarp, 0, stream>>>(
      x, weight, y, rstd, rows, D, eps);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename W>
void rmsnorm_backward(const T* x, const W* weight, const float* rstd, const T* dy, T* dx,
                      float* dweight, int64_t rows, int64_t D, void* workspace,
                      cudaStream_t stream) {
  if (rows <= 0 || D <= 0) return;
  norm_dx_kernel<<<row_blocks(rows), kRowsPerBlock * detail::kWarp, 0, stream>>>(
      x, weight, static_cast<const float*>(nullptr), rstd, dy, dx, rows, D);
  MT_CUDA_LAUNCH_CHECK();
  param_grads(x, static_cast<const float*>(nullptr), rstd, dy, dweight,
              static_cast<float*>(nullptr), rows, D, workspace, stream);
}

#define MT_INSTANTIATE(T, W)                                                                       \
  template void layernorm_forward<T, W>(const T*, const W*, const W*, T*, float*, float*, int64_t, \
                                        int64_t, float, cudaStream_t);                             \
  template void layernorm_backward<T, W>(const T*, const W*, const float*, const float*, const T*, \
                                         T*, float*, float*, int64_t, int64_t, void*,              \
                                         cudaStream_t);                                            \
  template void rmsnorm_forward<T, W>(const T*, const W*, T*, float*, int64_t, int64_t, float,     \
                                      cudaStream_t);                                               \
  template void rmsnorm_backward<T, W>(const T*, const W*, const float*, const T*, T*, float*,     \
                                       int64_t, int64_t, void*, cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
MT_INSTANTIATE(__nv_bfloat16, float)
MT_INSTANTIATE(__half, __half)
MT_INSTANTIATE(__half, float)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
