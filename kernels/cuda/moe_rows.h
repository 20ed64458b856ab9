#pragma once
// The row movement and gated sums of the mixture-of-experts token dispatch, op for op
// kernels/cpu/moe_rows.h. Moves copy row_bytes of any element type, in the widest words the row
// size and both pointers' alignment allow. An index outside the rows counts as -1 here (the CPU
// kernels raise an error; a kernel cannot throw), and a scatter naming one target twice is the
// caller's error (the rows race). All launchers are asynchronous on `stream`.
//
// Sums: T is the rows' storage type (float, __nv_bfloat16, __half), OutT T or float. One block
// per token adds its k slots in slot order in fp32, each gated term as one fused multiply-add
// (what the CPU loop compiles to with -march on FMA hardware, so fp32 results should then agree
// bit for bit); the gate gradients are fp64 block sums, deterministic for a given launch.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace megatron::kernels::cuda {

void gather_rows(const void* src, int64_t src_rows, const int32_t* index, int64_t n,
                 size_t row_bytes, void* out, cudaStream_t stream);
void scatter_rows(const void* src, const int32_t* index, int64_t n, int64_t out_rows,
                  size_t row_bytes, void* out, cudaStream_t stream);

template <typename T, typename OutT>
void moe_combine(const T* rows, int64_t n_rows, const int32_t* index, const float* gates,
                 int64_t tokens, int64_t topk, int64_t dim, OutT* out, cudaStream_t stream);
template <typename T>
void moe_combine_backward(const T* rows, const float* gates, const T* dy, int64_t tokens,
                          int64_t topk, int64_t dim, T* d_rows, float* d_gates,
                          cudaStream_t stream);

}  // namespace megatron::kernels::cuda
