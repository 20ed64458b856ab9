#pragma once
// CUDA element-wise kernels (launchers), op for op kernels/cpu/elementwise.h with the same
// semantics. T is the storage type (float, __nv_bfloat16, __half); the math is fp32 and comes
// from kernels/common/numeric.h, shared with the CPU kernels. All launchers are asynchronous on
// `stream`; n == 0 is a no-op.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cuda {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);  // out = a + b
// acc += x; TAcc/TX in {(f,f), (bf16,bf16), (f16,f16), (f,bf16), (f,f16)}.
template <typename TAcc, typename TX>
void add_inplace(TAcc* acc, const TX* x, int64_t n, cudaStream_t stream);
template <typename T>
void scale_inplace(T* x, float s, int64_t n, cudaStream_t stream);  // x *= s
// y[r, :] += bias for each of the `rows` rows of y [rows, n]
template <typename T>
void add_bias(T* y, const T* bias, int64_t rows, int64_t n, cudaStream_t stream);
template <typename T>
void fill(T* x, float value, int64_t n, cudaStream_t stream);
// dst = src converted (round-to-nearest-even into 16-bit types); every pair of
// float/__nv_bfloat16/__half.
template <typename TSrc, typename TDst>
void cast(const TSrc* src, TDst* dst, int64_t n, cudaStream_t stream);

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, math::Gelu kind, cudaStream_t stream);
// dx = dy * gelu'(x)
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, math::Gelu kind, cudaStream_t stream);

// y = tanh(x); dx = dy * (1 - y^2) from the output y (dx may be dy).
template <typename T>
void tanh_forward(const T* x, T* y, int64_t n, cudaStream_t stream);
template <typename T>
void tanh_backward(const T* y, const T* dy, T* dx, int64_t n, cudaStream_t stream);

// *count += number of elements with !(|x| <= limit) (beyond it or not finite); the caller zeroes
// *count (device memory) first.
template <typename T>
void count_outside(const T* x, int64_t n, float limit, unsigned long long* count,
                   cudaStream_t stream);

// Gated linear units over rows: x is [rows, 2F] = [gate | up]; y[rows, F] = act(gate) * up, with
// math::Glu's clamps and offset (GPT-OSS's unit) where set; the element math is math::glu_value
// and math::glu_grads, as on the CPU.
template <typename T>
void glu_forward(const T* x, T* y, int64_t rows, int64_t F, math::Glu glu, cudaStream_t stream);
template <typename T>
void glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, math::Glu glu,
                  cudaStream_t stream);

}  // namespace megatron::kernels::cuda
