#pragma once
// The shape and options of one attention call, shared by the CPU and CUDA attention, flash
// attention and rope kernels (layouts: kernels/cpu/attention.h).
#include <cstdint>

namespace megatron::kernels {

struct AttentionShape {
  int64_t S, B, H, G, Dh;
  int64_t head_offset = 0;   // global index of local head 0 (tensor parallel)
  int64_t total_heads = 0;   // global head count (0 means H)
  int64_t batch_offset = 0;  // global index of local sample 0 (data parallel / micro-batching)
};

enum class CudnnUse : uint8_t { Never, WhereSupported, Always };

struct AttentionOptions {
  float scale;  // usually 1/sqrt(Dh)
  bool causal;
  const uint8_t* key_mask = nullptr;
  // [B, S] document of each token (packed sequences): query i sees key j only when both lie in
  // the same document, on top of the causal and key masks. Null: one document per sequence.
  const int32_t* segment_ids = nullptr;
  // Sliding-window attention (> 0; causal only): query i sees key j only when i - j < window
  // (Mistral's sliding_window; Megatron-Core's window_size (window - 1, 0)). 0: every key.
  int64_t window = 0;
  float dropout_p = 0.0f;
  uint64_t seed = 0, stream = 0;
  // > 0: each score s (after the scale) becomes softcap * tanh(s / softcap) before masking and
  // softmax (Gemma 2's attn_logit_softcapping); its backward multiplies by 1 - tanh^2.
  float softcap = 0.0f;
  // Whether CUDA's fused attention runs on cuDNN's SDPA (model.attention_backend; the CPU has no
  // cuDNN and ignores it): where cuDNN supports the problem (auto), always (fused: an error where
  // it cannot), or never (flash: our own kernels, kernels/cuda/flash_attention.h).
  CudnnUse cudnn = CudnnUse::Never;
};

// One block of context-parallel attention: query rows [q_start, q_start + q_rows) of the global
// sequence (AttentionShape::S, which masks and dropout indices use) against key rows
// [k_start, k_start + k_rows). The queries are read from fused qkv rows; the keys and values from
// fused rows too, or, kv_packed, from [k_rows, B, G, 2, Dh] (each group's key head, then its
// value head), the layout context parallelism moves between ranks. key_mask and segment_ids are
// those of the global sequence ([B, S]).
struct AttentionBlock {
  int64_t q_start = 0, q_rows = 0, k_start = 0, k_rows = 0;
  bool kv_packed = false;
};

// Whether any query of the block can see any of its keys (causal order, sliding window); a
// block that cannot is skipped (its forward would give lse -inf rows, its backward nothing).
inline bool block_visible(const AttentionOptions& opt, const AttentionBlock& b) {
  if (b.q_rows == 0 || b.k_rows == 0) return false;
  if (opt.causal && b.k_start > b.q_start + b.q_rows - 1) return false;  // keys after every query
  // Every key before the first query's window (windows only move forward).
  const int64_t first_seen = opt.window > 0 ? b.q_start - opt.window + 1 : 0;
  return b.k_start + b.k_rows - 1 >= first_seen;
}

}  // namespace megatron::kernels
