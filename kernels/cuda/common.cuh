#pragma once
// Device helpers shared by the kernels/cuda sources (not a kernel interface): storage-type
// conversions (fp32 math on float, __nv_bfloat16 and __half storage), warp and block
// reductions, launch-size arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "megatron/backend/cuda/check.h"
#include "kernels/cuda/storage_type.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cuda::detail {

constexpr int kWarp = 32;

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <>
__device__ __forceinline__ float to_float<__half>(__half x) {
  return __half2float(x);
}

// Round-to-nearest-even, as math::float_to_bf16_bits / float_to_fp16_bits on the CPU.
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// NaNs propagate like fmaxf does not: a NaN lane is ignored (as detail::max_of on the CPU).
__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions for blockDim.x a multiple of 32 (<= 1024). `scratch` holds 32 values;
// every thread gets the result. Reduction order is fixed by the thread layout, so results are
// reproducible run to run for a fixed launch configuration.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

using cuda::dtype_of;  // kernels/cuda/storage_type.h

// Carves 256-byte-aligned pieces out of a workspace. With base == nullptr it only adds up the
// size (the same sequence of take() calls sizes and then carves a workspace).
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* take(int64_t count) {
    offset_ = (offset_ + 255) / 256 * 256;
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += static_cast<size_t>(count) * sizeof(T);
    return p;
  }
  size_t bytes() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// Grid for a grid-stride loop over n elements.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535 * 8) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

// Threads for one block per row of length L: a multiple of 32 in [32, max_threads].
inline int row_threads(int64_t L, int max_threads = 1024) {
  int64_t t = (L + kWarp - 1) / kWarp * kWarp;
  if (t < kWarp) t = kWarp;
  if (t > max_threads) t = max_threads;
  return static_cast<int>(t);
}

}  // namespace megatron::kernels::cuda::detail

#define MT_CUDA_LAUNCH_CHECK() MT_CUDA_CHECK(cudaGetLastError())
