#include "kernels/common/numeric.h"
#include "kernels/cuda/elementwise.h"
#include "megatron/backend/cuda/check.h"

namespace megatron::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void gelu_forward_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = math::gelu_tanh(x[i]);
}

__global__ void gelu_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                     float* __restrict__ dx, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = dy[i] * math::gelu_tanh_grad(x[i]);
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

}  // namespace

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  MT_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, dy, dx, n);
  MT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace megatron::kernels::cuda
