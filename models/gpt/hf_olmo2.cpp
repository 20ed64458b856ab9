#include "models/gpt/hf_olmo2.h"

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_rope.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;
using hf::TensorMapping;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

}  // namespace

bool is_hf_olmo2(const std::string& architecture) { return architecture == kOlmo2; }

bool is_olmo2_model(const config::ModelConfig& m) {
  return m.sublayer_output_norm && !m.sublayer_input_norm;
}

config::ModelConfig olmo2_model_from_hf(const hf::ConfigJson& c) {
  std::set<std::string> known = decoder_keys();
  known.insert({"attention_bias", "attention_dropout"});
  c.check_known(known, kOlmo2);
  config::ModelConfig m = llama_style_model(c, 1e-5);
  if (c.boolean_or("attention_bias", false))
    c.fail("attention_bias",
           "true (biases on q/k/v/o but not on the MLP) has no equivalent here: add_bias puts "
           "them on every projection");
  m.qk_layernorm = true;
  m.qk_layernorm_span = config::QkNormSpan::Projection;
  m.sublayer_input_norm = false;
  m.sublayer_output_norm = true;
  read_rope(c, m);
  if (m.rotary_percent != 1.0)
    c.fail(c.has("rope_parameters") ? "rope_parameters" : "rope_scaling",
           concat("partial_rotary_factor ", m.rotary_percent, ": ", kOlmo2, " turns whole heads"));
  return m;
}

Json olmo2_hf_config(const config::ModelConfig& m, const std::string& dtype,
                     const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  j["architectures"] = {kOlmo2};
  j["model_type"] = "olmo2";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = m.ffn();
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.query_groups();
  if (m.kv_channels > 0 || j.contains("head_dim")) j["head_dim"] = m.head_dim();
  j["max_position_embeddings"] = m.max_positions();
  j["rms_norm_eps"] = m.layernorm_epsilon;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["attention_dropout"] = m.attention_dropout;
  j["tie_word_embeddings"] = m.tie_embeddings;
  write_dtype_and_pad(m, dtype, j);
  write_rope(m, j);
  return j;
}

std::vector<TensorMapping> olmo2_mappings(const config::ModelConfig& m, int64_t Vp) {
  MT_INPUT_CHECK(gemma_only_feature(m).empty(), kOlmo2, " has no ", gemma_only_feature(m));
  MT_INPUT_CHECK(is_olmo2_model(m) && m.qk_layernorm &&
                     m.qk_layernorm_span == config::QkNormSpan::Projection && !m.add_bias &&
                     !m.add_qkv_bias && !m.moe.enabled() &&
                     m.activation == config::Activation::SwiGLU &&
                     m.normalization == config::Normalization::RMSNorm && m.rotary() &&
                     m.rotary_percent == 1.0 && m.attention_window() == 0 &&
                     m.no_rope_freq.every == 0 && m.no_rope_freq.pattern.empty(),
                 kOlmo2,
                 " has RMSNorms on the sub-layers' outputs only, q/k norms over the whole "
                 "projections, rope on whole heads in every layer, a SwiGLU MLP, no biases, "
                 "experts or sliding windows: this model is not one");
  const int64_t D = m.hidden_size, F = m.ffn(), H = m.num_attention_heads, G = m.query_groups(),
                Dh = m.head_dim();
  std::vector<TensorMapping> out;
  out.push_back(embed_tokens_weight(m, Vp));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
    const std::string a = h + "self_attn.";
    out.push_back(llama_qkv_weight(n, a, D, H, G, Dh));
    out.push_back(
        hf::copy_mapping(n + "attention.q_norm.weight", vec({H * Dh}), a + "q_norm.weight"));
    out.push_back(
        hf::copy_mapping(n + "attention.k_norm.weight", vec({G * Dh}), a + "k_norm.weight"));
    out.push_back(
        hf::copy_mapping(n + "attention.proj.weight", vec({D, H * Dh}), a + "o_proj.weight"));
    out.push_back(hf::copy_mapping(n + "attention_output_norm.weight", vec({D}),
                                   h + "post_attention_layernorm.weight"));
    gated_mlp_weights(out, n + "mlp.", h + "mlp.", D, F);
    out.push_back(hf::copy_mapping(n + "mlp_output_norm.weight", vec({D}),
                                   h + "post_feedforward_layernorm.weight"));
  }
  final_norm_and_head(out, m, Vp);
  return out;
}

std::set<std::string> olmo2_ignored_tensors(const config::ModelConfig& m) {
  return llama_style_ignored_tensors(m);
}

}  // namespace megatron::models
