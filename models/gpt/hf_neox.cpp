#include "models/gpt/hf_neox.h"

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_rope.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;
using hf::TensorMapping;

constexpr int64_t kMaxDefaultSeq = 4096;  // the imported recipe's context, as the other decoders

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

// hidden_act: "gelu" is the exact erf GeLU (Pythia); the tanh approximations are model.activation
// gelu.
config::Activation neox_activation(const hf::ConfigJson& c) {
  const std::string act = c.string_or("hidden_act", "gelu");
  if (act == "gelu") return config::Activation::GeLUExact;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    return config::Activation::GeLU;
  c.fail("hidden_act", concat("'", act, "' (gelu, gelu_new or gelu_pytorch_tanh convert)"));
}

// Rotary embeddings: transformers 5's rope_parameters (rope_theta, partial_rotary_factor,
// scaling), or 4.x's rotary_emb_base and rotary_pct (defaults 10000 and 0.25, as transformers').
void read_neox_rope(const hf::ConfigJson& c, config::ModelConfig& m) {
  read_rope(c, m);
  if (!c.has("rope_parameters")) {
    m.rope_theta = c.number_or("rotary_emb_base", c.number_or("rope_theta", 10000.0));
    m.rotary_percent = c.number_or("rotary_pct", 0.25);
  } else if (!c.json()["rope_parameters"].contains("partial_rotary_factor")) {
    m.rotary_percent = c.number_or("rotary_pct", 0.25);
  }
  if (!(m.rotary_percent > 0.0 && m.rotary_percent <= 1.0))
    c.fail("rotary_pct", concat(m.rotary_percent, " outside (0, 1]"));
}

}  // namespace

bool is_hf_neox(const std::string& architecture) { return architecture == kGptNeoX; }

bool is_neox_model(const config::ModelConfig& m) {
  return m.normalization == config::Normalization::LayerNorm && m.rotary();
}

config::ModelConfig neox_model_from_hf(const hf::ConfigJson& c) {
  c.check_known(
      {"vocab_size",        "hidden_size",        "num_hidden_layers",   "num_attention_heads",
       "intermediate_size", "hidden_act",         "rotary_pct",          "rotary_emb_base",
       "rope_theta",        "rope_parameters",    "rope_scaling",        "max_position_embeddings",
       "initializer_range", "layer_norm_eps",     "tie_word_embeddings", "use_parallel_residual",
       "attention_bias",    "classifier_dropout", "is_decoder",          "hidden_dropout",
       "attention_dropout"},
      kGptNeoX);
  config::ModelConfig m;
  m.arch = config::Arch::GPT;
  m.num_layers = c.integer("num_hidden_layers");
  m.hidden_size = c.integer("hidden_size");
  m.num_attention_heads = c.integer("num_attention_heads");
  if (m.num_attention_heads <= 0 || m.hidden_size % m.num_attention_heads != 0)
    c.fail("num_attention_heads", concat(m.num_attention_heads,
                                         " must be > 0 and divide "
                                         "hidden_size ",
                                         m.hidden_size));
  m.ffn_hidden_size = c.integer("intermediate_size");
  m.max_position_embeddings = c.integer("max_position_embeddings");
  m.seq_length = std::min(m.max_position_embeddings, kMaxDefaultSeq);
  m.vocab_size = c.integer("vocab_size");
  m.layernorm_epsilon = c.number_or("layer_norm_eps", 1e-5);
  m.tie_embeddings = c.boolean_or("tie_word_embeddings", false);
  m.normalization = config::Normalization::LayerNorm;
  m.position_embedding = config::PositionEmbedding::Rope;
  m.activation = neox_activation(c);
  m.init_method_std = c.number_or("initializer_range", 0.02);
  m.parallel_residual = c.boolean_or("use_parallel_residual", true);
  m.hidden_dropout = c.number_or("hidden_dropout", 0.0);
  m.attention_dropout = c.number_or("attention_dropout", 0.0);
  // Biases on q/k/v and the output projection (attention_bias) and always on the MLP: the
  // native model has them everywhere or nowhere.
  if (!c.boolean_or("attention_bias", true))
    c.fail("attention_bias", "false (the MLP keeps its biases: only all or none convert)");
  m.add_bias = true;
  read_neox_rope(c, m);
  return m;
}

Json neox_hf_config(const config::ModelConfig& m, const std::string& dtype,
                    const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  j["architectures"] = {kGptNeoX};
  j["model_type"] = "gpt_neox";
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.hidden_size;
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["intermediate_size"] = m.ffn();
  j["hidden_act"] = m.activation == config::Activation::GeLUExact ? "gelu" : "gelu_new";
  j["max_position_embeddings"] = m.max_positions();
  j["layer_norm_eps"] = m.layernorm_epsilon;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["use_parallel_residual"] = m.parallel_residual;
  j["hidden_dropout"] = m.hidden_dropout;
  j["attention_dropout"] = m.attention_dropout;
  j["attention_bias"] = true;
  j["torch_dtype"] = dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
  j.erase("dtype");
  // Both spellings: transformers 4 reads rotary_pct / rotary_emb_base, 5 rope_parameters.
  if (!j.contains("rope_parameters") || !j["rope_parameters"].is_object())
    j["rope_parameters"] = Json::object();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  write_rope(m, j);
  j["rope_parameters"]["partial_rotary_factor"] = m.rotary_percent;
  j["rotary_pct"] = m.rotary_percent;
  j["rotary_emb_base"] = m.rope_theta;
  return j;
}

std::vector<TensorMapping> neox_mappings(const config::ModelConfig& m, int64_t Vp,
                                         const std::string& head_name) {
  MT_INPUT_CHECK(gemma_only_feature(m).empty(), kGptNeoX, " has no ", gemma_only_feature(m));
  MT_INPUT_CHECK(m.add_bias && !m.add_qkv_bias && !m.moe.enabled() && !m.qk_layernorm &&
                     m.query_groups() == m.num_attention_heads &&
                     m.head_dim() * m.num_attention_heads == m.hidden_size &&
                     m.activation != config::Activation::SwiGLU && m.attention_window() == 0 &&
                     m.sublayer_input_norm && !m.sublayer_output_norm,
                 kGptNeoX,
                 " has biases on every projection, one key/value head per query head, a GeLU MLP "
                 "and no experts, q/k norms or sliding windows: this model is not one");
  const int64_t D = m.hidden_size, F = m.ffn(), V = m.vocab_size;
  std::vector<TensorMapping> out;
  out.push_back(hf::padded_rows_mapping("embedding.word_embeddings.weight", vec({Vp, D}),
                                        "gpt_neox.embed_in.weight", V));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), h = concat("gpt_neox.layers.", l, ".");
    // query_key_value rows are [head][q, k, v][head_dim]: the native fused QKV without groups.
    const std::vector<std::pair<std::string, std::vector<int64_t>>> same = {
        {"input_norm.weight", vec({D})},           {"input_norm.bias", vec({D})},
        {"attention.qkv.weight", vec({3 * D, D})}, {"attention.qkv.bias", vec({3 * D})},
        {"attention.proj.weight", vec({D, D})},    {"attention.proj.bias", vec({D})},
        {"post_attention_norm.weight", vec({D})},  {"post_attention_norm.bias", vec({D})},
        {"mlp.fc1.weight", vec({F, D})},           {"mlp.fc1.bias", vec({F})},
        {"mlp.fc2.weight", vec({D, F})},           {"mlp.fc2.bias", vec({D})}};
    const char* hf_names[] = {"input_layernorm.weight",           "input_layernorm.bias",
                              "attention.query_key_value.weight", "attention.query_key_value.bias",
                              "attention.dense.weight",           "attention.dense.bias",
                              "post_attention_layernorm.weight",  "post_attention_layernorm.bias",
                              "mlp.dense_h_to_4h.weight",         "mlp.dense_h_to_4h.bias",
                              "mlp.dense_4h_to_h.weight",         "mlp.dense_4h_to_h.bias"};
    for (size_t i = 0; i < same.size(); ++i)
      out.push_back(hf::copy_mapping(n + same[i].first, same[i].second, h + hf_names[i]));
  }
  out.push_back(
      hf::copy_mapping("final_norm.weight", vec({D}), "gpt_neox.final_layer_norm.weight"));
  out.push_back(hf::copy_mapping("final_norm.bias", vec({D}), "gpt_neox.final_layer_norm.bias"));
  if (!m.tie_embeddings)
    out.push_back(hf::padded_rows_mapping("output_layer.weight", vec({Vp, D}), head_name, V));
  return out;
}

std::set<std::string> neox_ignored_tensors(const config::ModelConfig& m) {
  std::set<std::string> out;
  for (int64_t l = 0; l < m.num_layers; ++l) {  // buffers older checkpoints saved
    out.insert(concat("gpt_neox.layers.", l, ".attention.bias"));
    out.insert(concat("gpt_neox.layers.", l, ".attention.masked_bias"));
    out.insert(concat("gpt_neox.layers.", l, ".attention.rotary_emb.inv_freq"));
  }
  return out;
}

}  // namespace megatron::models
