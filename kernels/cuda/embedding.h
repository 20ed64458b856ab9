#pragma once
// Embedding lookup over a (possibly vocab-sharded) table holding rows
// [vocab_start, vocab_start + vocab_rows), op for op kernels/cpu/embedding.h: ids outside that
// range produce zero rows and no gradient. (The CPU kernel rejects negative ids with an error; a
// kernel cannot throw, so here they are treated as out of range: zero rows, no gradient.)
//
// T: table/activation storage; the gradient table is fp32 (main grads).
// Backward is deterministic without atomics or sorting: each block owns a range of table rows,
// scans all tokens in order and adds the matching dout rows, each thread owning fixed columns,
// so every dtable element receives its tokens in token order: the CPU kernel's summation order,
// bit-identical to it in fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace megatron::kernels::cuda {

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n_tokens, const T* table, int64_t vocab_start,
                       int64_t vocab_rows, int64_t dim, T* out, cudaStream_t stream);
// dtable[id - vocab_start, :] += dout[t, :]
template <typename T>
void embedding_backward(const int32_t* ids, int64_t n_tokens, const T* dout, int64_t vocab_start,
                        int64_t vocab_rows, int64_t dim, float* dtable, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
