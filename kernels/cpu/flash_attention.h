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

}  // namespace megatron::kernels::cpu
