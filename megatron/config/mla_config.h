#pragma once
// Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's MLATransformerConfig keys, flattened
// into the model section): queries through a low-rank path (q_lora_rank; 0: one projection),
// keys and values from one compressed latent of kv_lora_rank per token plus a rope key of
// qk_pos_emb_head_dim shared by all heads; per head, qk_head_dim + qk_pos_emb_head_dim query/key
// dimensions and v_head_dim value dimensions (megatron/transformer/mla.h).
#include <cstdint>

#include "megatron/config/key_info.h"

namespace megatron::config {

struct KeyOrigins;
struct ModelConfig;

struct MlaConfig {
  bool multi_latent_attention = false;
  int64_t q_lora_rank = 0;  // 0: a plain query projection (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 512;
  int64_t qk_head_dim = 128;         // per head, the query/key dimensions without rope
  int64_t qk_pos_emb_head_dim = 64;  // per head, the rope dimensions (the key's shared by heads)
  int64_t v_head_dim = 128;

  bool enabled() const { return multi_latent_attention; }
  // The query/key head dimension of the attention core.
  int64_t qk_dims() const { return qk_head_dim + qk_pos_emb_head_dim; }
  // Checked by ModelConfig::validate (validate_model.cpp) against the rest of the model.
  void validate(const KeyOrigins& origins, const ModelConfig& model) const;
  bool operator==(const MlaConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("multi_latent_attention", s.multi_latent_attention);
    v("q_lora_rank", s.q_lora_rank, noted(s.q_lora_rank == 0 ? "a plain query projection" : ""));
    v("kv_lora_rank", s.kv_lora_rank);
    v("qk_head_dim", s.qk_head_dim);
    v("qk_pos_emb_head_dim", s.qk_pos_emb_head_dim);
    v("v_head_dim", s.v_head_dim);
  }
};

}  // namespace megatron::config
