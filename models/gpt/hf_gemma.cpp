#include "models/gpt/hf_gemma.h"

#include <algorithm>
#include <cmath>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_rope.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;
using hf::TensorMapping;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

std::set<std::string> gemma_keys(const std::string& arch) {
  std::set<std::string> known = decoder_keys();
  known.insert({"hidden_activation", "attention_bias", "attention_dropout", "query_pre_attn_scalar",
                "sliding_window", "layer_types", "final_logit_softcapping",
                "attn_logit_softcapping", "cache_implementation", "use_bidirectional_attention"});
  if (arch == kGemma3)
    known.insert({"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"});
  return known;
}

double optional_number(const hf::ConfigJson& c, const char* key) {
  return c.has(key) && !c.json()[key].is_null() ? c.number(key) : 0.0;
}

// Which layers slide: layer_types, else Gemma 2's alternation (sliding first) or Gemma 3's
// sliding_window_pattern (every 6th layer full).
std::vector<int64_t> sliding_layers(const hf::ConfigJson& c, const std::string& arch,
                                    int64_t layers) {
  const bool listed = c.has("layer_types") && !c.json()["layer_types"].is_null();
  const int64_t every =
      arch == kGemma2 || listed
          ? 2
          : c.integer_or("sliding_window_pattern", c.integer_or("_sliding_window_pattern", 6));
  if (every <= 0) c.fail("sliding_window_pattern", concat("must be > 0 (got ", every, ")"));
  std::vector<int64_t> slides(static_cast<size_t>(layers), 0);
  for (int64_t l = 0; l < layers; ++l) slides[static_cast<size_t>(l)] = (l + 1) % every != 0;
  return read_layer_types(c, layers, slides);
}

// Keys i - W < j <= i on the sliding layers: window_size (W - 1, 0), the full ones listed by
// window_attn_skip_freq (1 = sliding).
void read_windows(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  set_layer_windows(c, sliding_layers(c, arch, m.num_layers), m);
}

// Gemma 3's two rope settings: transformers 5's rope_parameters per layer type, or 4's global
// rope_theta / rope_scaling with rope_local_base_freq. The sliding layers' rope is unscaled.
void read_gemma3_rope(const hf::ConfigJson& c, config::ModelConfig& m) {
  nlohmann::json j = c.json();
  double local = 10000.0;
  const bool nested = j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                      j["rope_parameters"].contains("full_attention");
  if (nested) {
    const nlohmann::json rp = j["rope_parameters"];
    const nlohmann::json sliding = rp.value("sliding_attention", nlohmann::json::object());
    if (sliding.value("rope_type", std::string("default")) != "default")
      c.fail("rope_parameters", "sliding_attention: only the default rope type converts (got " +
                                    sliding["rope_type"].dump() + ")");
    local = sliding.value("rope_theta", local);
    j["rope_parameters"] = rp["full_attention"];
  } else {
    local = c.number_or("rope_local_base_freq", local);
    if (!c.has("rope_theta") && !c.has("rope_parameters")) j["rope_theta"] = 1000000.0;
  }
  j.erase("rope_local_base_freq");
  read_rope(hf::ConfigJson(j, c.path()), m);
  if (!(local > 0)) c.fail("rope_local_base_freq", concat("must be > 0 (got ", local, ")"));
  if (m.attention_window() > 0) {
    m.rope_local_base_freq = local;
  } else if (local != m.rope_theta || m.rotary_seq_len_interpolation_factor != 1.0) {
    c.fail("sliding_window",
           "no layer has a window shorter than the context, so the local "
           "rope base (of the sliding layers) has nowhere to go");
  }
}

void read_gemma_features(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    if (!c.has(key) || c.json()[key].is_null()) continue;
    const std::string act = c.string_or(key, "");
    if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu_fast")
      c.fail(key, concat("'", act, "' (the tanh-approximated GELU gate converts: geglu)"));
  }
  if (c.boolean_or("attention_bias", false)) c.fail("attention_bias", "true is not implemented");
  if (c.has("use_bidirectional_attention") && c.json()["use_bidirectional_attention"] == true)
    c.fail("use_bidirectional_attention", "true (a bidirectional encoder) is not implemented");
  const double q_scalar = c.number_or("query_pre_attn_scalar", static_cast<double>(m.head_dim()));
  if (!(q_scalar > 0)) c.fail("query_pre_attn_scalar", concat("must be > 0 (got ", q_scalar, ")"));
  if (q_scalar != static_cast<double>(m.head_dim())) m.softmax_scale = 1.0 / std::sqrt(q_scalar);
  m.attn_logit_softcapping = optional_number(c, "attn_logit_softcapping");
  m.final_logit_softcapping = optional_number(c, "final_logit_softcapping");
  if (m.attn_logit_softcapping < 0 || m.final_logit_softcapping < 0)
    c.fail(m.attn_logit_softcapping < 0 ? "attn_logit_softcapping" : "final_logit_softcapping",
           "must be > 0 or null");
  read_windows(c, arch, m);
  if (arch == kGemma3) {
    m.qk_layernorm = true;
    read_gemma3_rope(c, m);
  } else {
    read_rope(c, m);
  }
  if (m.rotary_percent != 1.0)
    c.fail(c.has("rope_parameters") ? "rope_parameters" : "rope_scaling",
           concat("partial_rotary_factor ", m.rotary_percent, ": ", arch, " turns whole heads"));
}

bool is_gemma_model(const config::ModelConfig& m) {
  return m.layernorm_zero_centered_gamma && m.sublayer_input_norm && m.sublayer_output_norm;
}

// Gemma 3's rope_parameters per layer type (transformers 5), or 4's spelling where the
// original used it.
void write_gemma3_rope(const config::ModelConfig& m, Json& j) {
  const bool old_spelling = j.contains("rope_local_base_freq");
  if (old_spelling) {
    j.erase("rope_parameters");
    write_rope(m, j);
    j["rope_local_base_freq"] = m.rope_local_base_freq;
    return;
  }
  Json global = Json::object();
  global["rope_parameters"] = Json::object();
  write_rope(m, global);
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = {
      {"full_attention", global["rope_parameters"]},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", m.rope_local_base_freq}}}};
}

void write_windows(const config::ModelConfig& m, Json& j) {
  const int64_t window = m.attention_window();
  j["sliding_window"] = window > 0 ? Json(window) : Json(nullptr);
  Json types = Json::array();
  for (int64_t l = 0; l < m.num_layers; ++l)
    types.push_back(m.layer_window(l) > 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;  // (transformers prefers it to a sliding_window_pattern kept)
}

// The query_pre_attn_scalar a softmax scale stands for (an integer in transformers 5).
int64_t query_pre_attn_scalar(const config::ModelConfig& m) {
  if (!m.softmax_scale) return m.head_dim();
  const double q = 1.0 / (*m.softmax_scale * *m.softmax_scale);
  const int64_t rounded = std::llround(q);
  MT_INPUT_CHECK(std::abs(q - static_cast<double>(rounded)) < 1e-6 * q, "model.softmax_scale ",
                 *m.softmax_scale,
                 " is not 1 / sqrt(an integer): Gemma's query_pre_attn_scalar cannot describe it");
  return rounded;
}

}  // namespace

bool is_hf_gemma(const std::string& a) { return a == kGemma2 || a == kGemma3; }

std::string gemma_architecture_for(const config::ModelConfig& m) {
  if (!is_gemma_model(m)) return {};
  return m.qk_layernorm || m.rope_local_base_freq > 0 ? kGemma3 : kGemma2;
}

config::ModelConfig gemma_model_from_hf(const hf::ConfigJson& c, const std::string& arch) {
  c.check_known(gemma_keys(arch), arch);
  config::ModelConfig m;
  m.arch = config::Arch::LLaMA;
  read_decoder_sizes(c, m);
  m.tie_embeddings = c.boolean_or("tie_word_embeddings", true);
  m.layernorm_epsilon = c.number_or("rms_norm_eps", 1e-6);
  m.attention_dropout = c.number_or("attention_dropout", 0.0);
  m.normalization = config::Normalization::RMSNorm;
  m.activation = config::Activation::GeGLU;
  m.position_embedding = config::PositionEmbedding::Rope;
  m.add_bias = false;
  m.layernorm_zero_centered_gamma = true;
  m.sublayer_input_norm = m.sublayer_output_norm = true;
  m.scale_embeddings_by_sqrt_hidden = true;
  read_gemma_features(c, arch, m);
  return m;
}

Json gemma_hf_config(const config::ModelConfig& m, const std::string& arch,
                     const std::string& dtype, const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  j["architectures"] = {arch};
  j["model_type"] = arch == kGemma2 ? "gemma2" : "gemma3_text";
  write_decoder_sizes(m, m.ffn(), j);
  j["hidden_activation"] = "gelu_pytorch_tanh";
  if (j.contains("hidden_act")) j["hidden_act"] = "gelu_pytorch_tanh";
  j["attention_bias"] = false;
  j["attention_dropout"] = m.attention_dropout;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["query_pre_attn_scalar"] = query_pre_attn_scalar(m);
  auto cap = [](double v) { return v > 0 ? Json(v) : Json(nullptr); };
  j["attn_logit_softcapping"] = cap(m.attn_logit_softcapping);
  j["final_logit_softcapping"] = cap(m.final_logit_softcapping);
  write_windows(m, j);
  if (arch == kGemma3)
    write_gemma3_rope(m, j);
  else
    write_rope(m, j);
  write_dtype_and_pad(m, dtype, j);
  return j;
}

std::vector<TensorMapping> gemma_mappings(const config::ModelConfig& m, const std::string& arch,
                                          int64_t Vp) {
  const bool gemma3 = arch == kGemma3;
  MT_INPUT_CHECK(
      gemma_architecture_for(m) == arch && m.scale_embeddings_by_sqrt_hidden &&
          m.activation == config::Activation::GeGLU &&
          m.normalization == config::Normalization::RMSNorm && !m.add_bias && !m.add_qkv_bias &&
          !m.moe.enabled() && m.rotary() && m.rotary_percent == 1.0 &&
          m.qk_layernorm_span == config::QkNormSpan::Head && m.no_rope_freq.every == 0 &&
          m.no_rope_freq.pattern.empty() && !m.parallel_residual,
      arch,
      " has 1 + w RMSNorms around both sub-layers, scaled embeddings, a GELU-tanh gated MLP, rope "
      "on whole heads in every layer, no biases or experts",
      gemma3 ? " and per-head q/k norms or a local rope base" : ", no q/k norms or local rope base",
      ": this model is not one");
  const int64_t D = m.hidden_size, F = m.ffn(), H = m.num_attention_heads, G = m.query_groups(),
                Dh = m.head_dim();
  std::vector<TensorMapping> out;
  out.push_back(embed_tokens_weight(m, Vp));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
    const std::string a = h + "self_attn.";
    out.push_back(
        hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "input_layernorm.weight"));
    out.push_back(llama_qkv_weight(n, a, D, H, G, Dh));
    if (m.qk_layernorm) {
      out.push_back(
          hf::copy_mapping(n + "attention.q_norm.weight", vec({Dh}), a + "q_norm.weight"));
      out.push_back(
          hf::copy_mapping(n + "attention.k_norm.weight", vec({Dh}), a + "k_norm.weight"));
    }
    out.push_back(
        hf::copy_mapping(n + "attention.proj.weight", vec({D, H * Dh}), a + "o_proj.weight"));
    out.push_back(hf::copy_mapping(n + "attention_output_norm.weight", vec({D}),
                                   h + "post_attention_layernorm.weight"));
    out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                   h + "pre_feedforward_layernorm.weight"));
    gated_mlp_weights(out, n + "mlp.", h + "mlp.", D, F);
    out.push_back(hf::copy_mapping(n + "mlp_output_norm.weight", vec({D}),
                                   h + "post_feedforward_layernorm.weight"));
  }
  final_norm_and_head(out, m, Vp);
  return out;
}

std::set<std::string> gemma_ignored_tensors(const config::ModelConfig& m) {
  return llama_style_ignored_tensors(m);
}

}  // namespace megatron::models
