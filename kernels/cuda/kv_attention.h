#pragma once
// KV-cached causal attention for incremental decoding on CUDA, the counterpart of
// kernels/cpu/kv_attention.h with the same layouts and semantics: the S new positions' keys and
// values (from the fused qkv [S, B, G, (H/G + 2), Dh], positions past..past+S-1, rope already
// applied) are appended to the caches [B, G, capacity, Dh], then each new query i attends to
// cached positions 0..past+i (only the last `window` of them with a sliding window > 0):
// scale, soft-capping (softcap > 0: cap * tanh(score / cap), Gemma 2), max-subtracted softmax,
// weighted sum of the values. out is [S, B, H, Dh]. sinks (device, fp32 [H], or null): attention
// sinks' logits, one per head, in every row's softmax denominator (GPT-OSS).
//
// T in {float, __nv_bfloat16, __half} is the storage type of qkv, the caches and out; the math
// is fp32. Dh <= 256. One block per (b, h, query): its warps split the visible keys, each keeps
// an online softmax (as flash_attention.cu's forward) and the block merges them at the end, so
// no score row is stored and any cache length works.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cuda {

inline constexpr int64_t kKvMaxHeadDim = 256;

// Throws megatron::Error for a shape it does not run (Dh > 256, positions past the capacity).
template <typename T>
void kv_cache_attention(const AttentionShape& shape, float scale, const T* qkv, T* keys, T* values,
                        int64_t past, int64_t capacity, T* out, int64_t window, float softcap,
                        const float* sinks, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
