#pragma once
// Causal attention for incremental decoding: the S new positions' keys and values (from the
// fused qkv [S, B, G, (H/G + 2), Dh], positions past..past+S-1, rope already applied) are
// appended to per-layer caches [B, G, capacity, Dh], and each new query i attends to cached
// positions 0..past+i (only the last `window` of them with a sliding window > 0). The same
// arithmetic as kernels/cpu/attention.h's causal forward
// (scale, max-subtracted softmax in fp32), so decoding step by step gives what one full
// forward gives. out is [S, B, H, Dh].
#include <cstdint>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cpu {

// sinks [H] (optional): attention sinks' logits in each row's denominator
// (kernels/cpu/attention_sinks.h).
void kv_cache_attention(const AttentionShape& shape, float scale, const float* qkv, float* keys,
                        float* values, int64_t past, int64_t capacity, float* out,
                        int64_t window = 0, float softcap = 0.0f, const float* sinks = nullptr);

}  // namespace megatron::kernels::cpu
