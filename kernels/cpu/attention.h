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
// null). A fully masked row yields zeros. Dropout on the probabilities with probability
// dropout_p uses Philox(seed, stream) at index
// (((batch_offset + b) * total_heads + head_offset + h) * S + i) * S + j, so masks are the same
// whatever the tensor-parallel split of the heads or the data-parallel split of the batch.
#include <cstdint>

namespace megatron::kernels::cpu {

struct AttentionShape {
  int64_t S, B, H, G, Dh;
  int64_t head_offset = 0;   // global index of local head 0 (tensor parallel)
  int64_t total_heads = 0;   // global head count (0 means H)
  int64_t batch_offset = 0;  // global index of local sample 0 (data parallel / micro-batching)
};

struct AttentionOptions {
  float scale;  // usually 1/sqrt(Dh)
  bool causal;
  const uint8_t* key_mask = nullptr;
  float dropout_p = 0.0f;
  uint64_t seed = 0, stream = 0;
};

void attention_forward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs);
// Writes dqkv (same layout as qkv) from dout [S, B, H, Dh].
void attention_backward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);

}  // namespace megatron::kernels::cpu
