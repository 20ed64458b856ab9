#pragma once
// Naive reference of kernels/cpu/moe_rows.h (one element at a time; sums in fp64).
#include <cstddef>
#include <cstdint>

namespace megatron::kernels::ref {

void gather_rows(const void* src, const int32_t* index, int64_t n, size_t row_bytes, void* out);
void scatter_rows(const void* src, const int32_t* index, int64_t n, size_t row_bytes, void* out);
void moe_combine(const float* rows, const int32_t* index, const float* gates, int64_t tokens,
                 int64_t topk, int64_t dim, float* out);
void moe_combine_backward(const float* rows, const float* gates, const float* dy, int64_t tokens,
                          int64_t topk, int64_t dim, float* d_rows, float* d_gates);

}  // namespace megatron::kernels::ref
