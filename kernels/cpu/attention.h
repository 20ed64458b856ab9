#pragma once
// Scaled dot-product attention reading Q, K, V straight out of the fused QKV projection.
//
// Layouts (sequence-major, as Megatron): qkv is [S, B, G, (H/G + 2), Dh]: for each of the G
// query groups, its H/G query heads, then its key head, then its value head. H query heads,
// G key/value groups (G == H is plain multi-head, G < H is GQA). out is [S, B, H, Dh].
// probs [B, H, S, S] is saved by forward for backward (post-mask, post-dropout is NOT stored:
// backward regenerates the dropout mask from Philox).
//
// Masks: causal (key j > query i masked); key_mask [B, S] (1 = attend, 0 = padding; may be
// null); segment_ids [B, S] (packed documents: key j of another document than query i is masked;
// may be null). A fully masked row yields zeros. Dropout on the probabilities with probability
// dropout_p uses Philox(seed, stream) at index
// (((batch_offset + b) * total_heads + head_offset + h) * S + i) * S + j, so masks are the same
// whatever the tensor-parallel split of the heads or the data-parallel split of the batch.
#include <cstdint>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cpu {

void attention_forward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs);
// Writes dqkv (same layout as qkv) from dout [S, B, H, Dh].
void attention_backward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);

}  // namespace megatron::kernels::cpu
