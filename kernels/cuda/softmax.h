#pragma once
// Row softmax, op for op kernels/cpu/softmax.h: y[r, :] = softmax(scale * x[r, :]) over rows of
// length L (a row of all -inf gives zeros); backward dx = scale * y * (dy - sum(dy * y)).
// Storage T in {float, __nv_bfloat16, __half}; fp32 math. One block per row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace megatron::kernels::cuda {

template <typename T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t L, float scale, cudaStream_t stream);
template <typename T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t L, float scale,
                      cudaStream_t stream);

}  // namespace megatron::kernels::cuda
