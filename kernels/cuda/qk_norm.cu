#include "kernels/cuda/common.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/qk_norm.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;
using detail::warp_sum;

constexpr int kRowsPerBlock = 8;      // warps per block in the row kernels
constexpr int64_t kChunkGroups = 64;  // query groups per partial sum of the weight gradients
constexpr int kParamThreads = 256;

int64_t chunks_for(int64_t groups) { return (groups + kChunkGroups - 1) / kChunkGroups; }
unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// One warp per row of x [groups * (q_slots + 2), Dh].
template <typename T, typename W>
__global__ void qk_forward_kernel(const T* x, const W* wq, const W* wk, T* y, float* rstd,
                                  int64_t groups, int64_t q_slots, int64_t Dh, float eps) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  const int64_t slots = q_slots + 2;
  if (r >= groups * slots) return;
  const int64_t g = r / slots, slot = r % slots;
  const T* xr = x + r * Dh;
  T* yr = y + r * Dh;
  if (slot == q_slots + 1) {  // the value head
    for (int64_t j = lane; j < Dh; j += detail::kWarp) yr[j] = xr[j];
    return;
  }
  const float rs = detail::rms_row_forward(xr, slot < q_slots ? wq : wk, yr, Dh, eps, lane);
  if (lane == 0) rstd[g * (q_slots + 1) + slot] = rs;
}

// dx, one warp per row; dx may alias dy (each lane reads its elements before writing them).
template <typename T, typename W>
__global__ void qk_dx_kernel(const T* x, const W* wq, const W* wk, const float* rstd, const T* dy,
                             T* dx, int64_t groups, int64_t q_slots, int64_t Dh) {
  const int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / detail::kWarp;
  const int lane = threadIdx.x % detail::kWarp;
  const int64_t slots = q_slots + 2;
  if (r >= groups * slots) return;
  const int64_t g = r / slots, slot = r % slots;
  const T* dyr = dy + r * Dh;
  T* dxr = dx + r * Dh;
  if (slot == q_slots + 1) {
    for (int64_t j = lane; j < Dh; j += detail::kWarp) dxr[j] = dyr[j];
    return;
  }
  detail::norm_row_dx(x + r * Dh, slot < q_slots ? wq : wk, false, 0.0f,
                      rstd[g * (q_slots + 1) + slot], dyr, dxr, Dh, lane);
}

// Pass 1: block c sums dy * xhat of groups [c * kChunkGroups, ...) in order, the query slots into
// partial[c][0][Dh] and the key slot into partial[c][1][Dh].
template <typename T>
__global__ void qk_param_partial_kernel(const T* x, const float* rstd, const T* dy, float* partial,
                                        int64_t groups, int64_t q_slots, int64_t Dh) {
  const int64_t c = blockIdx.x, slots = q_slots + 2;
  const int64_t g0 = c * kChunkGroups, g1 = g0 + kChunkGroups < groups ? g0 + kChunkGroups : groups;
  for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
    float aq = 0.0f, ak = 0.0f;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t slot = 0; slot <= q_slots; ++slot) {
        const int64_t r = g * slots + slot;
        const float v =
            to_float(dy[r * Dh + d]) * to_float(x[r * Dh + d]) * rstd[g * (q_slots + 1) + slot];
        if (slot < q_slots)
          aq += v;
        else
          ak += v;
      }
    }
    partial[(c * 2) * Dh + d] = aq;
    partial[(c * 2 + 1) * Dh + d] = ak;
  }
}

// Pass 2: dwq/dwk[d] += the chunks' partials in order.
__global__ void qk_param_final_kernel(const float* partial, float* dwq, float* dwk, int64_t chunks,
                                      int64_t Dh) {
  const int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (e >= 2 * Dh) return;
  const int64_t which = e / Dh, d = e % Dh;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c) s += partial[(c * 2 + which) * Dh + d];
  (which == 0 ? dwq : dwk)[d] += s;
}

}  // namespace

size_t qk_rmsnorm_backward_workspace_bytes(int64_t groups, int64_t Dh) {
  return static_cast<size_t>(2 * chunks_for(groups) * Dh) * sizeof(float);
}

template <typename T, typename W>
void qk_rmsnorm_forward(const T* x, const W* wq, const W* wk, T* y, float* rstd, int64_t groups,
                        int64_t q_slots, int64_t Dh, float eps, cudaStream_t stream) {
  if (groups <= 0 || Dh <= 0) return;
  qk_forward_kernel<<<row_blocks(groups * (q_slots + 2)), kRowsPerBlock * detail::kWarp, 0,
                      stream>>>(x, wq, wk, y, rstd, groups, q_slots, Dh, eps);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T, typename W>
void qk_rmsnorm_backward(const T* x, const W* wq, const W* wk, const float* rstd, const T* dy,
                         T* dx, float* dwq, float* dwk, int64_t groups, int64_t q_slots, int64_t Dh,
                         void* workspace, cudaStream_t stream) {
  if (groups <= 0 || Dh <= 0) return;
  const int64_t chunks = chunks_for(groups);
  MT_CHECK(workspace != nullptr, "qk_rmsnorm_backward (CUDA): no workspace (need ",
           qk_rmsnorm_backward_workspace_bytes(groups, Dh), " bytes)");
  MT_CHECK(chunks <= 0x7fffffff, "qk_rmsnorm_backward (CUDA): ", groups, " groups");
  // Weight gradients first: dx may overwrite dy.
  float* partial = static_cast<float*>(workspace);
  qk_param_partial_kernel<<<static_cast<unsigned>(chunks), kParamThreads, 0, stream>>>(
      x, rstd, dy, partial, groups, q_slots, Dh);
  MT_CUDA_LAUNCH_CHECK();
  qk_param_final_kernel<<<detail::grid_for(2 * Dh, kParamThreads, 1 << 30), kParamThreads, 0,
                          stream>>>(partial, dwq, dwk, chunks, Dh);
  MT_CUDA_LAUNCH_CHECK();
  qk_dx_kernel<<<row_blocks(groups * (q_slots + 2)), kRowsPerBlock * detail::kWarp, 0, stream>>>(
      x, wq, wk, rstd, dy, dx, groups, q_slots, Dh);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T, W)                                                                    \
  template void qk_rmsnorm_forward<T, W>(const T*, const W*, const W*, T*, float*, int64_t,     \
                                         int64_t, int64_t, float, cudaStream_t);                \
  template void qk_rmsnorm_backward<T, W>(const T*, const W*, const W*, const float*, const T*, \
                                          T*, float*, float*, int64_t, int64_t, int64_t, void*, \
                                          cudaStream_t);
MT_INSTANTIATE(float, float)
MT_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
MT_INSTANTIATE(__nv_bfloat16, float)
MT_INSTANTIATE(__half, __half)
MT_INSTANTIATE(__half, float)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
