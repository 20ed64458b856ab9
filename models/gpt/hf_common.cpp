#include "models/gpt/hf_common.h"

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/core/format.h"

namespace megatron::models {

namespace {
constexpr int64_t kMaxDefaultSeq = 4096;
}  // namespace

void read_decoder_sizes(const hf::ConfigJson& c, config::ModelConfig& m) {
  m.num_layers = c.integer("num_hidden_layers");
  m.hidden_size = c.integer("hidden_size");
  m.num_attention_heads = c.integer("num_attention_heads");
  m.num_query_groups = c.integer_or("num_key_value_heads", m.num_attention_heads);
  m.ffn_hidden_size = c.integer("intermediate_size");
  m.max_position_embeddings = c.integer("max_position_embeddings");
  m.seq_length = std::min(m.max_position_embeddings, kMaxDefaultSeq);
  m.vocab_size = c.integer("vocab_size");
  m.tie_embeddings = c.boolean_or("tie_word_embeddings", false);
  m.init_method_std = c.number_or("initializer_range", 0.02);
  if (m.num_attention_heads <= 0) c.fail("num_attention_heads", "must be > 0");
  // head_dim (Mistral-NeMo, Qwen3) is Megatron-Core's kv_channels.
  const bool divides = m.hidden_size % m.num_attention_heads == 0;
  if (c.has("head_dim") && !c.json()["head_dim"].is_null()) {
    const int64_t head_dim = c.integer("head_dim");
    if (head_dim <= 0) c.fail("head_dim", concat("must be > 0 (got ", head_dim, ")"));
    if (!divides || head_dim != m.hidden_size / m.num_attention_heads) m.kv_channels = head_dim;
  } else if (!divides) {
    c.fail("num_attention_heads", "must divide hidden_size (or head_dim must be given)");
  }
}

void write_dtype_and_pad(const config::ModelConfig& m, const std::string& dtype,
                         nlohmann::ordered_json& j) {
  j["torch_dtype"] = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
  j.erase("dtype");
  if (!j.contains("pad_token_id") ||
      (j["pad_token_id"].is_number_integer() && j["pad_token_id"].get<int64_t>() >= m.vocab_size))
    j["pad_token_id"] = nullptr;
}

std::string gemma_only_feature(const config::ModelConfig& m) {
  if (m.layernorm_zero_centered_gamma) return "model.layernorm_zero_centered_gamma";
  if (m.scale_embeddings_by_sqrt_hidden) return "model.scale_embeddings_by_sqrt_hidden";
  if (m.softmax_scale) return "model.softmax_scale";
  if (m.attn_logit_softcapping > 0) return "model.attn_logit_softcapping";
  if (m.final_logit_softcapping > 0) return "model.final_logit_softcapping";
  if (m.activation == config::Activation::GeGLU) return "model.activation geglu";
  if (m.rope_local_base_freq > 0) return "model.rope_local_base_freq";
  return {};
}

}  // namespace megatron::models
