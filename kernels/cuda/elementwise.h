#pragma once
// CUDA element-wise kernels (launchers); the math is kernels/common/numeric.h, shared with the
// CPU kernels.
#include <cstdint>

#include <cuda_runtime.h>

namespace megatron::kernels::cuda {

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
