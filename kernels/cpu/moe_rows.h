#pragma once
// The row movement and gated sums of the mixture-of-experts token dispatch (megatron/backend/
// ops.h: gather_rows, scatter_rows, moe_combine, moe_combine_backward). Rows are `row_bytes` of
// any element type for the moves (a copy never converts), fp32 for the sums. Indices are int32;
// -1 means "no row" (a zero row for a gather, nothing for a scatter or a sum); any other index
// outside the rows is an error.
#include <cstddef>
#include <cstdint>

namespace megatron::kernels::cpu {

// out[i] = src[index[i]] (a zero row where index[i] == -1), i < n; src holds src_rows rows.
void gather_rows(const void* src, int64_t src_rows, const int32_t* index, int64_t n,
                 size_t row_bytes, void* out);
// out[index[i]] = src[i] for index[i] != -1, i < n; the other rows of out keep their values.
// A target row named twice is an error.
void scatter_rows(const void* src, const int32_t* index, int64_t n, int64_t out_rows,
                  size_t row_bytes, void* out);

// out[t] = sum over j = 0..k-1 of g[t k + j] * rows[r(t k + j)], r(i) = index[i] (index null:
// i), slots with r = -1 skipped, g = 1 without gates; accumulated in fp32 in slot order from 0.
// rows holds n_rows rows of dim; out [tokens, dim] is overwritten.
void moe_combine(const float* rows, int64_t n_rows, const int32_t* index, const float* gates,
                 int64_t tokens, int64_t topk, int64_t dim, float* out);
// The backward of moe_combine without an index (rows [tokens k, dim] in slot order):
// d_rows[i] = g[i] dy[t] and d_gates[i] = dot(dy[t], rows[i]) (accumulated in fp64), t = i / k.
void moe_combine_backward(const float* rows, const float* gates, const float* dy, int64_t tokens,
                          int64_t topk, int64_t dim, float* d_rows, float* d_gates);

}  // namespace megatron::kernels::cpu
