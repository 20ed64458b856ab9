#pragma once
// Inverted dropout with a Philox mask, op for op kernels/cpu/dropout.h: element i (global index
// index_offset + i) is kept when philox::uniform(seed, rng_stream, index_offset + i) >= p and
// scaled by 1/(1-p). The masks are bit-identical to the CPU kernel's for the same (seed,
// rng_stream, index_offset); backward regenerates the mask. p <= 0 copies; p >= 1 zeroes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dropout_rows.h"

namespace megatron::kernels::cuda {

template <typename T>
void dropout_forward(const T* x, T* y, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                     uint64_t index_offset, cudaStream_t stream);
template <typename T>
void dropout_backward(const T* dy, T* dx, int64_t n, float p, uint64_t seed, uint64_t rng_stream,
                      uint64_t index_offset, cudaStream_t stream);

// kernels/cpu/dropout.h dropout_rows: the rows of an [S, B, D] tensor in one launch, row r
// starting at Philox index rows.row_index(r); bit-identical masks. in may equal out.
template <typename T>
void dropout_rows(const T* in, T* out, const DropoutRows& rows, float p, uint64_t seed,
                  uint64_t rng_stream, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
