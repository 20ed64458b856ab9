#include "megatron/config/mla_config.h"

#include "megatron/config/checker.h"
#include "megatron/config/model_config.h"

namespace megatron::config {

void MlaConfig::validate(const KeyOrigins& origins, const ModelConfig& m) const {
  if (!multi_latent_attention) return;
  Checker c(origins);
  c.non_negative("model.q_lora_rank", q_lora_rank);
  c.positive("model.kv_lora_rank", kv_lora_rank);
  c.positive("model.qk_head_dim", qk_head_dim);
  c.positive("model.qk_pos_emb_head_dim", qk_pos_emb_head_dim);
  c.positive("model.v_head_dim", v_head_dim);
  c.check(qk_pos_emb_head_dim % 2 == 0, "model.qk_pos_emb_head_dim",
          concat("must be even (rope turns pairs; got ", qk_pos_emb_head_dim, ")"));
  // Values are padded to the query/key head dimension inside the attention core.
  c.check(v_head_dim <= qk_dims(), "model.v_head_dim",
          concat("must be <= qk_head_dim + qk_pos_emb_head_dim (got ", v_head_dim, " > ", qk_dims(),
                 ")"));
  const char* key = "model.multi_latent_attention";
  c.check(m.arch != Arch::BERT, key, "is for the decoders (model.arch gpt or llama)");
  c.check(m.rotary() && m.rotary_percent == 1.0, key,
          "needs rotary position embeddings (model.position_embedding rope or yarn) on the "
          "whole qk_pos_emb_head_dim (model.rotary_percent 1)");
  c.check(m.kv_channels == 0, "model.kv_channels",
          "must be unset with multi_latent_attention (qk_head_dim, qk_pos_emb_head_dim and "
          "v_head_dim give the head dimensions)");
  c.check(m.num_query_groups == 0 || m.num_query_groups == m.num_attention_heads,
          "model.num_query_groups",
          "must be unset with multi_latent_attention (every head has its own keys and values)");
  c.check(!m.qk_layernorm && !m.add_bias && !m.add_qkv_bias, key,
          "has no model.qk_layernorm, add_bias or add_qkv_bias (its latents are normalized, its "
          "projections have no biases)");
  c.check(m.no_rope_freq.every == 0 && m.no_rope_freq.pattern.empty(), "model.no_rope_freq",
          "multi-latent attention turns its rope dimensions in every layer");
  c.check(m.attn_logit_softcapping == 0, "model.attn_logit_softcapping",
          "is not implemented with multi_latent_attention");
  c.check(m.softmax_type == SoftmaxType::Vanilla, "model.softmax_type",
          "attention sinks are not implemented with multi_latent_attention");
}

}  // namespace megatron::config
