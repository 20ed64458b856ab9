#pragma once
// Naive reference of kernels/cpu/embedding.h.
#include <cstdint>

namespace megatron::kernels::ref {

void embedding_forward(const int32_t* ids, int64_t n_tokens, const float* table,
                       int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* out);
void embedding_backward(const int32_t* ids, int64_t n_tokens, const float* dout,
                        int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* dtable);

}  // namespace megatron::kernels::ref
