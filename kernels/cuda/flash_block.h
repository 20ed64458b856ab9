#pragma once
// Flash attention over one block of a global sequence on CUDA, the counterpart of
// kernels/cpu/flash_attention.h's block functions with the same layouts and semantics
// (kernels/common/attention_shape.h's AttentionBlock):
//
//   - context parallelism: a rank's query chunk against one key/value chunk (its own or one that
//     arrived over the ring); masks, sliding windows, packed documents and dropout indices are
//     those of the global positions, so the blocks merged by their log-sum-exp give the
//     single-process attention;
//   - the whole sequence as one block: flash_attention.h's SIMT path (fp32, dropout, head dims
//     the tensor-core kernels do not take), soft-capped scores (opt.softcap > 0, Gemma 2:
//     cap * tanh(score / cap)) included.
//
// q: fused rows [q_rows, B, G, H/G + 2, Dh] (only the query slots are read); kv: the same layout
// or, block.kv_packed, [k_rows, B, G, 2, Dh]; out [q_rows, B, H, Dh] (T), lse [B, H, q_rows]
// (fp32, -inf for a row that sees no key of the block). Backward ADDS into dq (query slots) and
// dkv (key/value slots) given the row's merged out and lse. T in {float, bf16, fp16}, fp32 math,
// Dh <= 256. Kernels as flash_attention.cu's (one warp per query or key row, 32-row tiles in
// shared memory; the key/value gradients per key over every query, deterministic, no atomics).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cuda {

size_t flash_block_backward_workspace_bytes(const AttentionShape& shape,
                                            const AttentionBlock& block);

template <typename T>
void flash_block_forward(const AttentionShape& shape, const AttentionOptions& opt,
                         const AttentionBlock& block, const T* q, const T* kv, T* out, float* lse,
                         cudaStream_t stream);
template <typename T>
void flash_block_backward(const AttentionShape& shape, const AttentionOptions& opt,
                          const AttentionBlock& block, const T* q, const T* kv, const T* out,
                          const float* lse, const T* dout, T* dq, T* dkv, void* workspace,
                          cudaStream_t stream);

// D[b, h, i] = sum_d dout * out over rows i of out [rows, B, H, Dh] (fp32 [B, H, rows]): the row
// terms of every flash backward (the tensor-core one's too).
template <typename T>
void flash_row_dots(const AttentionShape& shape, int64_t rows, const T* out, const T* dout,
                    float* D, cudaStream_t stream);

// Merges a block's forward (out [rows, B, H, Dh], lse [B, H, rows]) into the running result of
// the same rows (acc_out, same layout; acc_lse [B, H, *] at row stride acc_lse_stride), as
// kernels/cpu/flash_attention.h's flash_attention_merge. fp32.
void flash_block_merge(int64_t rows, int64_t B, int64_t H, int64_t Dh, const float* out,
                       const float* lse, float* acc_out, float* acc_lse, int64_t acc_lse_stride,
                       cudaStream_t stream);

}  // namespace megatron::kernels::cuda
