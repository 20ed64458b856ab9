#pragma once
// Embedding lookup over a (possibly vocab-sharded) table holding rows
// [vocab_start, vocab_start + vocab_rows). Ids outside that range produce zero rows and no
// gradient (the vocab-parallel case; other ranks contribute them). Ids must be >= 0.
#include <cstdint>

namespace megatron::kernels::cpu {

void embedding_forward(const int32_t* ids, int64_t n_tokens, const float* table,
                       int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* out);
// dtable[id - vocab_start, :] += dout[t, :]; deterministic (no races) for any thread count.
void embedding_backward(const int32_t* ids, int64_t n_tokens, const float* dout,
                        int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* dtable);

}  // namespace megatron::kernels::cpu
