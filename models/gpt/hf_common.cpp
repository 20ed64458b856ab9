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

config::ModelConfig llama_style_model(const hf::ConfigJson& c, double eps) {
  config::ModelConfig m;
  m.arch = config::Arch::LLaMA;
  read_decoder_sizes(c, m);
  m.layernorm_epsilon = c.number_or("rms_norm_eps", eps);
  m.attention_dropout = c.number_or("attention_dropout", 0.0);
  m.normalization = config::Normalization::RMSNorm;
  m.activation = config::Activation::SwiGLU;
  m.position_embedding = config::PositionEmbedding::Rope;
  m.add_bias = false;
  if (c.string_or("hidden_act", "silu") != "silu")
    c.fail("hidden_act", concat("'", c.string_or("hidden_act", ""), "' (only silu: SwiGLU)"));
  return m;
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

std::set<std::string> decoder_keys() {
  return {"vocab_size",
          "hidden_size",
          "intermediate_size",
          "num_hidden_layers",
          "num_attention_heads",
          "num_key_value_heads",
          "max_position_embeddings",
          "rms_norm_eps",
          "hidden_act",
          "tie_word_embeddings",
          "rope_theta",
          "rope_scaling",
          "rope_parameters",
          "head_dim"};
}

namespace {
std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }
}  // namespace

bool every_layer_routed(const config::ModelConfig& m) {
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (!m.moe.moe_layer_freq.is_moe(l)) return false;
  return true;
}

void write_decoder_sizes(const config::ModelConfig& m, int64_t ffn, nlohmann::ordered_json& j) {
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = ffn;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.query_groups();
  j["head_dim"] = m.head_dim();
  j["max_position_embeddings"] = m.max_positions();
  j["rms_norm_eps"] = m.layernorm_epsilon;
}

std::vector<int64_t> read_layer_types(const hf::ConfigJson& c, int64_t layers,
                                      std::vector<int64_t> slides) {
  if (!c.has("layer_types") || c.json()["layer_types"].is_null()) return slides;
  const auto& types = c.json()["layer_types"];
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers)
    c.fail("layer_types", concat("must list num_hidden_layers (", layers, ") entries"));
  slides.assign(static_cast<size_t>(layers), 0);
  for (int64_t l = 0; l < layers; ++l) {
    const auto& t = types[static_cast<size_t>(l)];
    if (t != "full_attention" && t != "sliding_attention")
      c.fail("layer_types", concat("has ", t.dump(), " (full_attention or sliding_attention)"));
    slides[static_cast<size_t>(l)] = t == "sliding_attention" ? 1 : 0;
  }
  return slides;
}

void set_layer_windows(const hf::ConfigJson& c, const std::vector<int64_t>& slides,
                       config::ModelConfig& m) {
  if (!c.has("sliding_window") || c.json()["sliding_window"].is_null()) return;
  const int64_t window = c.integer("sliding_window");
  if (window <= 0) c.fail("sliding_window", concat("must be > 0 (got ", window, ")"));
  if (window >= m.max_positions() || std::find(slides.begin(), slides.end(), 1) == slides.end())
    return;  // no layer's window limits anything
  m.window_size = {window - 1, 0};
  if (std::find(slides.begin(), slides.end(), 0) != slides.end())
    m.window_attn_skip_freq = {0, slides};
}

hf::TensorMapping llama_qkv_weight(const std::string& n, const std::string& a, int64_t D, int64_t H,
                                   int64_t G, int64_t Dh) {
  return hf::qkv_mapping(n + "attention.qkv.weight", vec({(H + 2 * G) * Dh, D}),
                         {{a + "q_proj.weight", vec({H * Dh, D})},
                          {a + "k_proj.weight", vec({G * Dh, D})},
                          {a + "v_proj.weight", vec({G * Dh, D})}},
                         H, G, Dh);
}

void gated_mlp_weights(std::vector<hf::TensorMapping>& out, const std::string& native,
                       const std::string& p, int64_t D, int64_t F) {
  out.push_back(hf::stacked_mapping(
      native + "fc1.weight", vec({2, F, D}),
      {{p + "gate_proj.weight", vec({F, D})}, {p + "up_proj.weight", vec({F, D})}}));
  out.push_back(hf::copy_mapping(native + "fc2.weight", vec({D, F}), p + "down_proj.weight"));
}

hf::TensorMapping embed_tokens_weight(const config::ModelConfig& m, int64_t Vp) {
  return hf::padded_rows_mapping("embedding.word_embeddings.weight", vec({Vp, m.hidden_size}),
                                 "model.embed_tokens.weight", m.vocab_size);
}

void final_norm_and_head(std::vector<hf::TensorMapping>& out, const config::ModelConfig& m,
                         int64_t Vp) {
  const int64_t D = m.hidden_size;
  out.push_back(hf::copy_mapping("final_norm.weight", vec({D}), "model.norm.weight"));
  if (!m.tie_embeddings)
    out.push_back(hf::padded_rows_mapping("output_layer.weight", vec({Vp, D}), "lm_head.weight",
                                          m.vocab_size));
}

std::set<std::string> llama_style_ignored_tensors(const config::ModelConfig& m) {
  std::set<std::string> out;
  for (int64_t l = 0; l < m.num_layers; ++l)
    out.insert(concat("model.layers.", l, ".self_attn.rotary_emb.inv_freq"));
  // (Some exporters write the shared table twice.)
  if (m.tie_embeddings) out.insert("lm_head.weight");
  return out;
}

}  // namespace megatron::models
