#pragma once
// Embedding lookup over a (possibly vocab-sharded) table holding rows
// [vocab_start, vocab_start + vocab_rows). Ids outside that range produce zero rows and no
// gradient (the vocab-parallel case; other ranks contribute them). Ids must be >= 0.
#include <cstdint>

namespace megatron::kernels::cpu {

// T: the storage type of the table and activations, float or bf16_t (instantiated in
// embedding.cpp); the table's gradient is fp32.
template <typename T>
void embedding_forward(const int32_t* ids, int64_t n_tokens, const T* table, int64_t vocab_start,
                       int64_t vocab_rows, int64_t dim, T* out);
// dtable[id - vocab_start, :] += dout[t, :]; deterministic (no races) for any thread count.
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n_tokens, const T* dout, int64_t vocab_start,
                        int64_t vocab_rows, int64_t dim, float* dtable);

}  // namespace megatron::kernels::cpu
