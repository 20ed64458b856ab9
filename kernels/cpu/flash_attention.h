#pragma once
// Fused ("flash", FlashAttention-2 style) scaled dot-product attention on the CPU.
//
// Same semantics as attention.h (read it first): qkv is the fused grouped projection
// [S, B, G, (H/G + 2), Dh] read in place, out is [S, B, H, Dh], AttentionShape's
// head_offset/total_heads/batch_offset, causal or bidirectional, an arbitrary key_mask [B, S]
// (holes allowed; a fully masked row yields zeros), segment_ids [B, S] (packed documents), GQA/MQA, scale, and dropout on the
// probabilities with the SAME Philox index rule
// (((batch_offset + b) * total_heads + head_offset + h) * S + i) * S + j, so the kept/dropped
// elements are bit for bit those of the unfused path and results agree to rounding.
//
// Instead of the [B, H, S, S] probabilities, forward stores only the per-row log-sum-exp
// lse [B, H, S] (fp32; -inf for a fully masked row): it runs an online softmax over key
// blocks. Backward recomputes P = exp(scale * q k^T - lse) block by block, and uses
// D_i = rowsum(dout_i * out_i) (= sum_j pv_ij dPv_ij of the unfused backward).
#include <cstdint>

#include "kernels/cpu/attention.h"

namespace megatron::kernels::cpu {

// out [S, B, H, Dh], lse [B, H, S].
void flash_attention_forward(const AttentionShape& shape, const AttentionOptions& opt,
                             const float* qkv, float* out, float* lse);
// Writes every element of dqkv (same layout as qkv) from out, lse (as forward wrote them) and
// dout [S, B, H, Dh].
void flash_attention_backward(const AttentionShape& shape, const AttentionOptions& opt,
                              const float* qkv, const float* out, const float* lse,
                              const float* dout, float* dqkv);

// Context parallelism: one block (kernels/common/attention_shape.h) of the global attention.
// Forward writes out [q_rows, B, H, Dh] and lse [B, H, q_rows] of the queries over this block's
// keys alone (blocks merge by their lse); backward ADDS into dq (fused rows, query slots only)
// and dkv (the kv layout), given the merged out and lse of the whole row.
void flash_attention_block_forward(const AttentionShape& shape, const AttentionOptions& opt,
                                   const AttentionBlock& block, const float* q, const float* kv,
                                   float* out, float* lse);
void flash_attention_block_backward(const AttentionShape& shape, const AttentionOptions& opt,
                                    const AttentionBlock& block, const float* q, const float* kv,
                                    const float* out, const float* lse, const float* dout,
                                    float* dq, float* dkv);
// Merges a block's forward (out [rows, B, H, Dh], lse [B, H, rows]) into the running result of
// the same query rows (acc_out with the same layout, acc_lse [B, H, *] at row stride
// acc_lse_stride): acc <- (acc e^acc_lse + out e^lse) / e^new_lse, new_lse = log(e^acc_lse +
// e^lse). A row with lse -inf (no visible key) leaves acc unchanged; acc starts as lse -inf.
void flash_attention_merge(int64_t rows, int64_t B, int64_t H, int64_t Dh, const float* out,
                           const float* lse, float* acc_out, float* acc_lse,
                           int64_t acc_lse_stride);

}  // namespace megatron::kernels::cpu
