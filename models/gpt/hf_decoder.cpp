#include "models/gpt/hf_decoder.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "megatron/core/error.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_moe.h"
#include "models/gpt/hf_rope.h"
#include "models/registry.h"

namespace megatron::models {

namespace {

using hf::HfSource;
using hf::TensorMapping;
using Json = nlohmann::ordered_json;

constexpr const char* kGpt2 = "GPT2LMHeadModel";
constexpr const char* kLlama = "LlamaForCausalLM";
constexpr const char* kMistral = "MistralForCausalLM";
constexpr const char* kQwen2 = "Qwen2ForCausalLM";
constexpr const char* kQwen3 = "Qwen3ForCausalLM";
constexpr const char* kPhi3 = "Phi3ForCausalLM";
constexpr const char* kSmolLM3 = "SmolLM3ForCausalLM";

std::string model_type(const std::string& a) {
  if (a == kGpt2) return "gpt2";
  if (a == kLlama) return "llama";
  if (a == kMistral) return "mistral";
  if (a == kQwen2) return "qwen2";
  if (a == kQwen3) return "qwen3";
  if (a == kPhi3) return "phi3";
  if (a == kSmolLM3) return "smollm3";
  if (a == kQwen2Moe) return "qwen2_moe";
  if (a == kQwen3Moe) return "qwen3_moe";
  return "mixtral";
}

// Qwen2's and Qwen3's attention (windows per layer; q/k/v biases or per-head q/k norms), with
// experts or without.
bool qwen2_like(const std::string& a) { return a == kQwen2 || a == kQwen2Moe; }
bool qwen3_like(const std::string& a) { return a == kQwen3 || a == kQwen3Moe; }

config::ModelConfig gpt2_from_hf(const hf::ConfigJson& c) {
  c.check_known(
      {"n_embd", "n_layer", "n_head", "n_inner", "n_positions", "vocab_size", "layer_norm_epsilon",
       "activation_function", "tie_word_embeddings", "scale_attn_weights",
       "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"},
      kGpt2);
  config::ModelConfig m;
  m.arch = config::Arch::GPT;
  m.num_layers = c.integer("n_layer");
  m.hidden_size = c.integer("n_embd");
  m.num_attention_heads = c.integer("n_head");
  m.ffn_hidden_size = c.integer_or("n_inner", 4 * m.hidden_size);
  m.max_position_embeddings = c.integer("n_positions");
  m.seq_length = m.max_position_embeddings;
  m.vocab_size = c.integer("vocab_size");
  m.layernorm_epsilon = c.number_or("layer_norm_epsilon", 1e-5);
  m.tie_embeddings = c.boolean_or("tie_word_embeddings", true);
  m.normalization = config::Normalization::LayerNorm;
  m.position_embedding = config::PositionEmbedding::Learned;
  m.add_bias = true;
  const std::string act = c.string_or("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast")
    c.fail("activation_function",
           concat("'", act, "' is not the tanh-approximated GeLU (gelu_new) the model computes"));
  m.activation = config::Activation::GeLU;
  if (!c.boolean_or("scale_attn_weights", true))
    c.fail("scale_attn_weights", "false (unscaled attention) is not supported");
  if (c.boolean_or("scale_attn_by_inverse_layer_idx", false))
    c.fail("scale_attn_by_inverse_layer_idx", "true is not supported");
  if (c.boolean_or("add_cross_attention", false))
    c.fail("add_cross_attention", "true (an encoder-decoder) is not supported");
  return m;
}

// The config.json keys the converter of `arch` reads or checks.
std::set<std::string> llama_family_keys(const std::string& arch) {
  std::set<std::string> known = decoder_keys();
  if (arch == kLlama) known.insert({"attention_bias", "mlp_bias", "pretraining_tp"});
  if (arch == kSmolLM3)
    known.insert({"attention_bias", "mlp_bias", "no_rope_layers", "no_rope_layer_interval",
                  "use_sliding_window", "sliding_window", "layer_types"});
  if (arch == kMistral || arch == kMixtral || qwen2_like(arch)) known.insert("sliding_window");
  if (qwen2_like(arch) || qwen3_like(arch))
    known.insert({"use_sliding_window", "max_window_layers", "layer_types"});
  if (qwen3_like(arch)) known.insert({"sliding_window", "attention_bias"});
  if (arch == kPhi3)
    known.insert({"sliding_window", "original_max_position_embeddings", "partial_rotary_factor",
                  "resid_pdrop", "embd_pdrop", "attention_bias"});
  if (is_hf_moe_decoder(arch)) {
    const std::set<std::string> moe = moe_config_keys(arch);
    known.insert(moe.begin(), moe.end());
  }
  return known;
}

// Biases everywhere (attention_bias and mlp_bias) are Megatron's add_bias; one without the other
// has no Megatron equivalent, nor has Qwen3's attention-only bias.
void read_biases(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  const bool attention_bias = c.boolean_or("attention_bias", false);
  const bool mlp_bias = c.boolean_or("mlp_bias", false);
  if (arch == kPhi3) {
    if (attention_bias) c.fail("attention_bias", "true is not implemented for Phi-3");
    // (transformers 4's Phi-3 keeps partial_rotary_factor at the top level; read_rope reads
    // 5's, in rope_parameters.)
    if (c.has("partial_rotary_factor")) m.rotary_percent = c.number("partial_rotary_factor");
  }
  if (qwen3_like(arch) && attention_bias)
    c.fail("attention_bias",
           "true (biases on q/k/v/o but not on the MLP) has no equivalent here: add_bias puts "
           "them on every projection, add_qkv_bias on q/k/v only");
  if (attention_bias != mlp_bias)
    c.fail(attention_bias ? "attention_bias" : "mlp_bias",
           "true only with the other true too (biases on every projection, Megatron's "
           "add_bias; not on some of them)");
  m.add_bias = attention_bias && mlp_bias;
}

// SmolLM3's NoPE layers: no_rope_layers holds 1 for a layer with rope and 0 for one without
// (Megatron-Core's no_rope_freq list is the reverse), else one in no_rope_layer_interval has none.
void read_nope_layers(const hf::ConfigJson& c, config::ModelConfig& m) {
  if (!c.has("no_rope_layers")) {
    const int64_t every = c.integer_or("no_rope_layer_interval", 4);
    if (every <= 0) c.fail("no_rope_layer_interval", concat("must be > 0 (got ", every, ")"));
    m.no_rope_freq = {every, {}};
    return;
  }
  const auto& list = c.json()["no_rope_layers"];
  if (!list.is_array() || static_cast<int64_t>(list.size()) < m.num_layers)
    c.fail("no_rope_layers", concat("must be a list of at least num_hidden_layers (", m.num_layers,
                                    ") entries of 0 or 1"));
  std::vector<int64_t> skip;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const auto& v = list[static_cast<size_t>(l)];
    if (!v.is_number_integer() || (v != 0 && v != 1))
      c.fail("no_rope_layers", concat("entry ", l, " is ", v.dump(), " (0 or 1)"));
    skip.push_back(v == 0 ? 1 : 0);
  }
  m.no_rope_freq = {0, {}};
  if (std::find(skip.begin(), skip.end(), 1) != skip.end()) m.no_rope_freq.pattern = skip;
}

// The sliding windows of Qwen2, Qwen3 and SmolLM3: with use_sliding_window, the layers that
// layer_types marks "sliding_attention" (else Qwen's layers from max_window_layers on, SmolLM3's
// NoPE layers) see sliding_window keys, the others all: Megatron-Core's window_size and
// window_attn_skip_freq (a 0/1 list, 1 = sliding).
void read_layer_windows(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  const bool sliding = c.boolean_or("use_sliding_window", false);
  std::vector<int64_t> slides(static_cast<size_t>(m.num_layers), 0);
  if (c.has("layer_types")) {
    slides = read_layer_types(c, m.num_layers, slides);
    if (!sliding && std::find(slides.begin(), slides.end(), 1) != slides.end())
      c.fail("layer_types", "has sliding_attention layers without use_sliding_window: true");
  } else {
    const int64_t first = arch == kSmolLM3 ? 0 : c.integer_or("max_window_layers", 28);
    for (int64_t l = first; l < m.num_layers; ++l)
      slides[static_cast<size_t>(l)] = arch == kSmolLM3 ? (m.skips_rope(l) ? 1 : 0) : 1;
  }
  if (!sliding) return;
  (void)c.integer("sliding_window");  // required with use_sliding_window (null is an error)
  set_layer_windows(c, slides, m);
}

// What sets the families apart: Qwen's sliding keys, q/k/v biases and q/k norms, the sliding
// windows of Mistral, Mixtral and Phi-3.
void read_family_features(const hf::ConfigJson& c, const std::string& arch,
                          config::ModelConfig& m) {
  if (arch == kSmolLM3) read_nope_layers(c, m);
  if (qwen2_like(arch) || qwen3_like(arch) || arch == kSmolLM3) read_layer_windows(c, arch, m);
  if (arch == kQwen2) m.add_qkv_bias = true;    // Qwen2's q/k/v carry biases (Qwen2-MoE: qkv_bias)
  if (qwen3_like(arch)) m.qk_layernorm = true;  // q_norm / k_norm per head, before rope
  if ((arch == kMistral || arch == kMixtral || arch == kPhi3) && c.has("sliding_window")) {
    // Keys i - W < j <= i: Megatron-Core's window_size (W - 1, 0).
    const int64_t window = c.integer("sliding_window");
    if (window <= 0) c.fail("sliding_window", concat("must be > 0 or null (got ", window, ")"));
    if (window < m.max_positions()) m.window_size = {window - 1, 0};
  }
}

config::ModelConfig llama_family_from_hf(const hf::ConfigJson& c, const std::string& arch) {
  const std::set<std::string> known = llama_family_keys(arch);
  c.check_known(known, arch);
  config::ModelConfig m;
  m.arch = config::Arch::LLaMA;
  read_decoder_sizes(c, m);
  m.layernorm_epsilon = c.number("rms_norm_eps");
  m.normalization = config::Normalization::RMSNorm;
  m.activation = config::Activation::SwiGLU;
  m.position_embedding = config::PositionEmbedding::Rope;
  if (c.string_or("hidden_act", "silu") != "silu")
    c.fail("hidden_act", concat("'", c.string_or("hidden_act", ""), "' (only silu: SwiGLU)"));
  read_biases(c, arch, m);
  read_family_features(c, arch, m);
  read_rope(c, m);
  if (m.rotary_percent != 1.0 && arch != kPhi3)  // (transformers turns whole heads there)
    c.fail(c.has("rope_parameters") ? "rope_parameters" : "rope_scaling",
           concat("partial_rotary_factor ", m.rotary_percent,
                  ": partial rotary embeddings convert "
                  "as Phi3ForCausalLM only (",
                  arch, " turns whole heads)"));
  if (is_hf_moe_decoder(arch)) read_moe_config(c, arch, m);
  return m;
}

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

bool uniform_window(const config::ModelConfig& m) {
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (m.layer_window(l) != m.attention_window()) return false;
  return true;
}

bool has_nope_layers(const config::ModelConfig& m) {
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (m.skips_rope(l)) return true;
  return false;
}

}  // namespace

bool is_hf_decoder(const std::string& a) {
  return a == kGpt2 || a == kLlama || a == kMistral || a == kQwen2 || a == kQwen3 || a == kPhi3 ||
         a == kSmolLM3 || is_hf_moe_decoder(a);
}

config::ModelConfig decoder_model_from_hf(const hf::ConfigJson& c, const std::string& arch) {
  MT_CHECK(is_hf_decoder(arch), "not a decoder architecture: ", arch);
  return arch == kGpt2 ? gpt2_from_hf(c) : llama_family_from_hf(c, arch);
}

std::string decoder_architecture_for(const config::ModelConfig& m) {
  if (m.arch == config::Arch::GPT) return kGpt2;
  if (m.moe.enabled()) return moe_architecture_for(m);
  if (m.qk_layernorm) return kQwen3;
  if (has_nope_layers(m)) return kSmolLM3;
  if (m.rotary_percent != 1.0) return kPhi3;  // (transformers turns part of a head there only)
  if (m.attention_window() > 0 && !uniform_window(m) && m.add_qkv_bias && !m.add_bias)
    return kQwen2;                                // per-layer windows (Qwen2's layer_types)
  if (m.attention_window() > 0) return kMistral;  // the LLaMA family's sliding window
  if (m.add_qkv_bias && !m.add_bias) return kQwen2;
  return kLlama;
}

namespace {

// The sliding windows: Mistral, Mixtral and Phi-3 one for every layer; Qwen2, Qwen3 and SmolLM3
// per layer (use_sliding_window, sliding_window and layer_types); the others none.
void write_windows(const config::ModelConfig& m, const std::string& arch, Json& j) {
  const int64_t window = m.attention_window();
  if (arch == kMistral || arch == kMixtral || arch == kPhi3) {
    j["sliding_window"] = window > 0 ? Json(window) : Json(nullptr);
  } else if (qwen2_like(arch) || qwen3_like(arch) || arch == kSmolLM3) {
    j["use_sliding_window"] = window > 0;
    if (window > 0) j["sliding_window"] = window;
    if (window > 0 || j.contains("layer_types")) {
      Json types = Json::array();
      for (int64_t l = 0; l < m.num_layers; ++l)
        types.push_back(m.layer_window(l) > 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
    }
    if (window > 0 && arch != kSmolLM3) {  // the first layer with a window, as Qwen counts them
      int64_t first = 0;
      while (first < m.num_layers && m.layer_window(first) == 0) ++first;
      j["max_window_layers"] = first;
    }
  } else {
    MT_INPUT_CHECK(window == 0, "model.window_size [", m.window_size[0], ", ", m.window_size[1],
                   "]: ", arch,
                   " has no sliding-window attention (MistralForCausalLM and "
                   "MixtralForCausalLM do)");
  }
}

}  // namespace

Json decoder_hf_config(const config::ModelConfig& m, const std::string& arch,
                       const std::string& dtype, const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  // A key the original left null (meaning "the default") stays null while the model still
  // has the default value.
  auto set_or_keep_null = [&](const char* key, int64_t value, int64_t default_value) {
    if (j.contains(key) && j[key].is_null() && value == default_value) return;
    j[key] = value;
  };
  j["architectures"] = {arch};
  j["model_type"] = model_type(arch);
  j["vocab_size"] = m.vocab_size;
  j["tie_word_embeddings"] = m.tie_embeddings;
  write_dtype_and_pad(m, dtype, j);
  if (arch == kGpt2) {
    j["n_embd"] = m.hidden_size;
    j["n_layer"] = m.num_layers;
    j["n_head"] = m.num_attention_heads;
    set_or_keep_null("n_inner", m.ffn(), 4 * m.hidden_size);
    j["n_positions"] = m.max_positions();
    j["layer_norm_epsilon"] = m.layernorm_epsilon;
    if (!j.contains("activation_function")) j["activation_function"] = "gelu_new";
    return j;
  }
  j["hidden_size"] = m.hidden_size;
  j["intermediate_size"] = arch == kMixtral ? m.moe.expert_ffn(m.ffn()) : m.ffn();
  j["num_hidden_layers"] = m.num_layers;
  j["num_attention_heads"] = m.num_attention_heads;
  j["num_key_value_heads"] = m.query_groups();
  set_or_keep_null("head_dim", m.head_dim(), m.hidden_size / m.num_attention_heads);
  j["max_position_embeddings"] = m.max_positions();
  j["rms_norm_eps"] = m.layernorm_epsilon;
  j["hidden_act"] = "silu";
  write_rope(m, j);
  if (arch == kLlama || arch == kSmolLM3)
    j["attention_bias"] = m.add_bias, j["mlp_bias"] = m.add_bias;
  if (arch == kSmolLM3) {
    Json rope_layers = Json::array();
    for (int64_t l = 0; l < m.num_layers; ++l) rope_layers.push_back(m.skips_rope(l) ? 0 : 1);
    j["no_rope_layers"] = rope_layers;
  }
  if (qwen3_like(arch) || arch == kPhi3) j["attention_bias"] = false;
  write_windows(m, arch, j);
  if (is_hf_moe_decoder(arch)) write_moe_config(m, arch, j);
  return j;
}

namespace {

// The sizes every layer's mappings use.
struct LayerDims {
  int64_t D, H, G, Dh, F, QKV;
  explicit LayerDims(const config::ModelConfig& m)
      : D(m.hidden_size),
        H(m.num_attention_heads),
        G(m.query_groups()),
        Dh(m.head_dim()),
        F(m.ffn()),
        QKV((H + 2 * G) * Dh) {}
};

// A model the architecture cannot describe is an InputError before anything is written.
void check_exportable(const std::string& arch, const config::ModelConfig& m) {
  const std::string gemma = gemma_only_feature(m);
  MT_INPUT_CHECK(gemma.empty(), arch, " has no ", gemma,
                 " (Gemma's: such a model converts as Gemma2ForCausalLM or Gemma3ForCausalLM)");
  MT_INPUT_CHECK(m.sublayer_input_norm && !m.sublayer_output_norm &&
                     m.qk_layernorm_span == config::QkNormSpan::Head,
                 arch,
                 " has norms before its sub-layers only and per-head q/k norms: a model with "
                 "sublayer_output_norm or qk_layernorm_span projection is not one (OLMo-2's "
                 "converts as Olmo2ForCausalLM)");
  check_moe_exportable(arch, m);
  MT_INPUT_CHECK(m.qk_layernorm == qwen3_like(arch), arch,
                 m.qk_layernorm ? " has no per-head query/key norms: a model with "
                                  "model.qk_layernorm: true converts as Qwen3ForCausalLM (or "
                                  "Qwen3MoeForCausalLM)"
                                : " normalizes queries and keys per head: it needs "
                                  "model.qk_layernorm: true");
  MT_INPUT_CHECK(arch != kPhi3 || (!m.add_qkv_bias && !m.moe.enabled()), arch,
                 " has no biases or experts");
  MT_INPUT_CHECK(arch == kPhi3 || m.rotary_percent == 1.0, arch,
                 " turns whole heads with rotary embeddings: a model with model.rotary_percent ",
                 m.rotary_percent, " converts as ", kPhi3);
  MT_INPUT_CHECK(uniform_window(m) || qwen2_like(arch) || qwen3_like(arch) || arch == kSmolLM3,
                 "model.window_attn_skip_freq: ", arch,
                 " has one sliding window for every layer (per-layer windows convert as "
                 "Qwen2ForCausalLM, Qwen3ForCausalLM or SmolLM3ForCausalLM)");
  MT_INPUT_CHECK(arch == kSmolLM3 || !has_nope_layers(m), arch,
                 " applies rope in every layer: a model with model.no_rope_freq converts as ",
                 kSmolLM3);
  MT_INPUT_CHECK(arch != kSmolLM3 || (!m.add_qkv_bias && !m.moe.enabled()), arch,
                 " has no q/k/v-only biases or experts");
  MT_INPUT_CHECK(!(qwen3_like(arch) && m.add_qkv_bias), arch,
                 " has no q/k/v-only biases (model.add_qkv_bias: true converts as "
                 "Qwen2ForCausalLM, without qk_layernorm)");
  MT_INPUT_CHECK(!m.add_bias || arch == kGpt2 || arch == kLlama || arch == kSmolLM3, arch,
                 " has no biases on its projections: a model with model.add_bias: true converts as "
                 "LlamaForCausalLM (attention_bias and mlp_bias) or GPT2LMHeadModel");
  const LayerDims d(m);
  MT_INPUT_CHECK(arch != kGpt2 || d.H * d.Dh == d.D, "model.kv_channels ", d.Dh,
                 " gives a query width ", d.H * d.Dh, " other than hidden_size ", d.D, ": ", kGpt2,
                 " has no head_dim to describe it");
}

// GPT-2 layer l: Conv1D weights stored [in, out], [q|k|v] fused.
void gpt2_layer(std::vector<TensorMapping>& out, const LayerDims& d, int64_t l) {
  const int64_t D = d.D, F = d.F, QKV = d.QKV;
  const std::string n = concat("layers.", l, "."), h = concat("transformer.h.", l, ".");
  out.push_back(hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "ln_1.weight"));
  out.push_back(hf::copy_mapping(n + "input_norm.bias", vec({D}), h + "ln_1.bias"));
  out.push_back(hf::fused_qkv_mapping(n + "attention.qkv.weight", vec({QKV, D}),
                                      {h + "attn.c_attn.weight", vec({D, QKV}), true}, d.H, d.G,
                                      d.Dh));
  out.push_back(hf::fused_qkv_mapping(n + "attention.qkv.bias", vec({QKV}),
                                      {h + "attn.c_attn.bias", vec({QKV}), false}, d.H, d.G, d.Dh));
  out.push_back(
      hf::transpose_mapping(n + "attention.proj.weight", vec({D, D}), h + "attn.c_proj.weight"));
  out.push_back(hf::copy_mapping(n + "attention.proj.bias", vec({D}), h + "attn.c_proj.bias"));
  out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}), h + "ln_2.weight"));
  out.push_back(hf::copy_mapping(n + "post_attention_norm.bias", vec({D}), h + "ln_2.bias"));
  out.push_back(hf::transpose_mapping(n + "mlp.fc1.weight", vec({F, D}), h + "mlp.c_fc.weight"));
  out.push_back(hf::copy_mapping(n + "mlp.fc1.bias", vec({F}), h + "mlp.c_fc.bias"));
  out.push_back(hf::transpose_mapping(n + "mlp.fc2.weight", vec({D, F}), h + "mlp.c_proj.weight"));
  out.push_back(hf::copy_mapping(n + "mlp.fc2.bias", vec({D}), h + "mlp.c_proj.bias"));
}

// Phi-3 layer l: fused [q|k|v] and [gate|up] projections.
void phi3_layer(std::vector<TensorMapping>& out, const LayerDims& d, int64_t l) {
  const int64_t D = d.D, F = d.F;
  const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
  const std::string a = h + "self_attn.";
  out.push_back(hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "input_layernorm.weight"));
  out.push_back(hf::fused_qkv_mapping(n + "attention.qkv.weight", vec({d.QKV, D}),
                                      {a + "qkv_proj.weight", vec({d.QKV, D}), false}, d.H, d.G,
                                      d.Dh));
  out.push_back(
      hf::copy_mapping(n + "attention.proj.weight", vec({D, d.H * d.Dh}), a + "o_proj.weight"));
  out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                 h + "post_attention_layernorm.weight"));
  out.push_back(hf::stacked_mapping(n + "mlp.fc1.weight", vec({2, F, D}),
                                    {{h + "mlp.gate_up_proj.weight", vec({2 * F, D})}}));
  out.push_back(hf::copy_mapping(n + "mlp.fc2.weight", vec({D, F}), h + "mlp.down_proj.weight"));
}

// LLaMA-family attention of layer l: separate q/k/v (biases, q/k norms), o_proj, the norms.
void llama_attention(std::vector<TensorMapping>& out, const config::ModelConfig& m,
                     const LayerDims& d, int64_t l) {
  const int64_t D = d.D, H = d.H, G = d.G, Dh = d.Dh;
  const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
  const std::string a = h + "self_attn.";
  out.push_back(hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "input_layernorm.weight"));
  out.push_back(llama_qkv_weight(n, a, D, H, G, Dh));
  if (m.add_qkv_bias || m.add_bias)
    out.push_back(hf::qkv_mapping(n + "attention.qkv.bias", vec({d.QKV}),
                                  {{a + "q_proj.bias", vec({H * Dh})},
                                   {a + "k_proj.bias", vec({G * Dh})},
                                   {a + "v_proj.bias", vec({G * Dh})}},
                                  H, G, Dh));
  if (m.qk_layernorm) {
    out.push_back(hf::copy_mapping(n + "attention.q_norm.weight", vec({Dh}), a + "q_norm.weight"));
    out.push_back(hf::copy_mapping(n + "attention.k_norm.weight", vec({Dh}), a + "k_norm.weight"));
  }
  out.push_back(
      hf::copy_mapping(n + "attention.proj.weight", vec({D, H * Dh}), a + "o_proj.weight"));
  if (m.add_bias)
    out.push_back(hf::copy_mapping(n + "attention.proj.bias", vec({D}), a + "o_proj.bias"));
  out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                 h + "post_attention_layernorm.weight"));
}

// LLaMA-family MLP of layer l: gate/up stacked into fc1, or hf_moe's routed layers.
void llama_mlp(std::vector<TensorMapping>& out, const std::string& arch,
               const config::ModelConfig& m, const LayerDims& d, int64_t l) {
  if (m.moe.enabled()) return moe_decoder_mlp(out, arch, m, l);
  const int64_t D = d.D, F = d.F;
  const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
  const std::string p = h + "mlp.";
  gated_mlp_weights(out, n + "mlp.", p, D, F);
  if (m.add_bias) {
    out.push_back(
        hf::stacked_mapping(n + "mlp.fc1.bias", vec({2, F}),
                            {{p + "gate_proj.bias", vec({F})}, {p + "up_proj.bias", vec({F})}}));
    out.push_back(hf::copy_mapping(n + "mlp.fc2.bias", vec({D}), p + "down_proj.bias"));
  }
}

}  // namespace

std::vector<TensorMapping> decoder_mappings(const std::string& arch, const config::ModelConfig& m,
                                            int64_t Vp) {
  check_exportable(arch, m);
  const LayerDims d(m);
  const int64_t D = d.D, V = m.vocab_size;
  const bool gpt2 = arch == kGpt2;
  const std::string root = gpt2 ? "transformer." : "model.";
  std::vector<TensorMapping> out;
  out.push_back(hf::padded_rows_mapping("embedding.word_embeddings.weight", vec({Vp, D}),
                                        root + (gpt2 ? "wte.weight" : "embed_tokens.weight"), V));
  if (gpt2)
    out.push_back(hf::copy_mapping("embedding.position_embeddings.weight",
                                   vec({m.max_positions(), D}), root + "wpe.weight"));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    if (gpt2) {
      gpt2_layer(out, d, l);
    } else if (arch == kPhi3) {
      phi3_layer(out, d, l);
    } else {
      llama_attention(out, m, d, l);
      llama_mlp(out, arch, m, d, l);
    }
  }
  out.push_back(hf::copy_mapping("final_norm.weight", vec({D}),
                                 root + (gpt2 ? "ln_f.weight" : "norm.weight")));
  if (gpt2) out.push_back(hf::copy_mapping("final_norm.bias", vec({D}), root + "ln_f.bias"));
  if (!m.tie_embeddings)
    out.push_back(
        hf::padded_rows_mapping("output_layer.weight", vec({Vp, D}), "lm_head.weight", V));
  return out;
}

std::set<std::string> decoder_ignored_tensors(const std::string& arch,
                                              const config::ModelConfig& m) {
  if (arch != kGpt2) return llama_style_ignored_tensors(m);
  std::set<std::string> out;
  for (int64_t l = 0; l < m.num_layers; ++l) {  // GPT-2's causal-mask buffers
    out.insert(concat("transformer.h.", l, ".attn.bias"));
    out.insert(concat("transformer.h.", l, ".attn.masked_bias"));
  }
  // A tied head saved anyway (some exporters write the shared table twice).
  if (m.tie_embeddings) out.insert("lm_head.weight");
  return out;
}

}  // namespace megatron::models
