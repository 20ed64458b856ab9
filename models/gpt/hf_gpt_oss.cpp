#include "models/gpt/hf_gpt_oss.h"

#include <algorithm>
#include <cmath>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"
#include "models/gpt/hf_rope.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;
using hf::HfSource;
using hf::TensorMapping;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

constexpr double kAlpha = 1.702;  // the quick GELU's (math::kQuickGeluAlpha)

// Sliding layers from layer_types (default: sliding first, alternating), keys i - W < j <= i.
void read_windows(const hf::ConfigJson& c, config::ModelConfig& m) {
  std::vector<int64_t> alternating(static_cast<size_t>(m.num_layers), 0);
  for (int64_t l = 0; l < m.num_layers; ++l) alternating[size_t(l)] = l % 2 == 0;
  set_layer_windows(c, read_layer_types(c, m.num_layers, alternating), m);
}

void read_quantization(const hf::ConfigJson& c) {
  if (!c.has("quantization_config") || c.json()["quantization_config"].is_null()) return;
  const auto& q = c.json()["quantization_config"];
  if (!q.is_object() || q.value("quant_method", std::string()) != "mxfp4")
    c.fail("quantization_config",
           concat("quant_method ",
                  q.is_object() ? q.value("quant_method", std::string("(none)")) : q.dump(), ": ",
                  kGptOss, " converts dense or MXFP4 (mxfp4) experts"));
}

void read_experts(const hf::ConfigJson& c, config::ModelConfig& m) {
  config::MoeConfig& e = m.moe;
  e.num_experts = c.integer("num_local_experts");
  e.moe_router_topk = c.integer("num_experts_per_tok");
  e.moe_ffn_hidden_size = m.ffn_hidden_size;
  e.moe_router_pre_softmax = false;  // softmax over the picked logits
  e.moe_router_load_balancing_type = config::MoeLoadBalancing::AuxLoss;
  e.moe_aux_loss_coeff = c.number_or("router_aux_loss_coef", 0.0);
  m.activation = config::Activation::QuickGeGLU;
  m.glu_linear_offset = 1.0;
  m.activation_func_clamp_value = c.number_or("swiglu_limit", 7.0);
  if (m.activation_func_clamp_value <= 0)
    c.fail("swiglu_limit", concat("must be > 0 (got ", m.activation_func_clamp_value, ")"));
  if (std::abs(c.number_or("swiglu_alpha", kAlpha) - kAlpha) > 1e-9)
    c.fail("swiglu_alpha", concat(c.number("swiglu_alpha"), ": the quick GELU here uses 1.702"));
}

// The attention of layer l: q/k/v and o with biases, the sinks, the input norm.
void attention(std::vector<TensorMapping>& out, const config::ModelConfig& m, int64_t l) {
  const int64_t D = m.hidden_size, H = m.num_attention_heads, G = m.query_groups(),
                Dh = m.head_dim();
  const std::string n = concat("layers.", l, "."), h = concat("model.layers.", l, ".");
  const std::string a = h + "self_attn.";
  out.push_back(hf::copy_mapping(n + "input_norm.weight", vec({D}), h + "input_layernorm.weight"));
  out.push_back(llama_qkv_weight(n, a, D, H, G, Dh));
  out.push_back(hf::qkv_mapping(n + "attention.qkv.bias", vec({(H + 2 * G) * Dh}),
                                {{a + "q_proj.bias", vec({H * Dh})},
                                 {a + "k_proj.bias", vec({G * Dh})},
                                 {a + "v_proj.bias", vec({G * Dh})}},
                                H, G, Dh));
  out.push_back(
      hf::copy_mapping(n + "attention.proj.weight", vec({D, H * Dh}), a + "o_proj.weight"));
  out.push_back(hf::copy_mapping(n + "attention.proj.bias", vec({D}), a + "o_proj.bias"));
  out.push_back(hf::copy_mapping(n + "attention.softmax_offset", vec({H}), a + "sinks"));
  out.push_back(hf::copy_mapping(n + "post_attention_norm.weight", vec({D}),
                                 h + "post_attention_layernorm.weight"));
}

// Native [2, F, ...] (gate rows, then up rows) from one source whose rows interleave them
// (gate 0, up 0, gate 1, ...).
TensorMapping deinterleaved(std::string native, std::vector<int64_t> shape, HfSource source,
                            int64_t F) {
  TensorMapping t;
  t.native = std::move(native);
  t.native_shape = std::move(shape);
  t.sources = {std::move(source)};
  for (int64_t half = 0; half < 2; ++half)
    for (int64_t j = 0; j < F; ++j) t.blocks.push_back({0, 2 * j + half, 1});
  return t;
}

void experts(std::vector<TensorMapping>& out, const config::ModelConfig& m, int64_t l) {
  const int64_t D = m.hidden_size, E = m.moe.num_experts, F = m.moe.expert_ffn(m.ffn());
  const std::string n = concat("layers.", l, ".mlp."), h = concat("model.layers.", l, ".mlp.");
  out.push_back(hf::copy_mapping(n + "router.weight", vec({E, D}), h + "router.weight"));
  out.push_back(hf::copy_mapping(n + "router.bias", vec({E}), h + "router.bias"));
  const std::string x = h + "experts.";
  for (int64_t e = 0; e < E; ++e) {
    const std::string ne = concat(n, "experts.", e, ".");
    const auto slab = [&](const char* fused) { return hf::expert_slab_name(x + fused, e); };
    out.push_back(deinterleaved(ne + "fc1.weight", vec({2, F, D}),
                                {slab("gate_up_proj"), vec({D, 2 * F}), true}, F));
    // The bias [2F] seen as [F, 2] (gate, up pairs): its transpose's rows are the gates, the ups.
    out.push_back(hf::transpose_mapping(ne + "fc1.bias", vec({2, F}), slab("gate_up_proj_bias")));
    out.push_back(hf::transpose_mapping(ne + "fc2.weight", vec({D, F}), slab("down_proj")));
    out.push_back(hf::copy_mapping(ne + "fc2.bias", vec({D}), slab("down_proj_bias")));
  }
}

}  // namespace

bool is_hf_gpt_oss(const std::string& architecture) { return architecture == kGptOss; }

bool is_gpt_oss_model(const config::ModelConfig& m) {
  return m.softmax_type != config::SoftmaxType::Vanilla ||
         m.activation == config::Activation::QuickGeGLU || m.glu_linear_offset != 0 ||
         m.activation_func_clamp_value != 0;
}

config::ModelConfig gpt_oss_model_from_hf(const hf::ConfigJson& c) {
  std::set<std::string> known = decoder_keys();
  known.insert({"attention_bias", "attention_dropout", "layer_types", "sliding_window",
                "num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
                "output_router_logits", "swiglu_limit", "swiglu_alpha", "quantization_config",
                "experts_per_token", "initial_context_length"});
  c.check_known(known, kGptOss);
  config::ModelConfig m = llama_style_model(c, 1e-5);  // (hidden_act: silu, unused by GPT-OSS)
  if (!c.boolean_or("attention_bias", true))
    c.fail("attention_bias", concat("false: ", kGptOss,
                                    "'s experts and router carry biases, which add_bias puts on "
                                    "every projection here"));
  m.add_bias = m.add_qkv_bias = true;
  m.softmax_type = config::SoftmaxType::Learnable;
  read_experts(c, m);
  read_windows(c, m);
  read_rope(c, m);
  read_quantization(c);
  return m;
}

Json gpt_oss_hf_config(const config::ModelConfig& m, const std::string& dtype,
                       const nlohmann::json& original) {
  Json j = original.is_object() ? Json(original) : Json::object();
  j.erase("quantization_config");  // the export writes dense experts
  j["architectures"] = {kGptOss};
  j["model_type"] = "gpt_oss";
  write_decoder_sizes(m, m.moe.expert_ffn(m.ffn()), j);
  j["attention_bias"] = true;
  j["attention_dropout"] = m.attention_dropout;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["num_local_experts"] = m.moe.num_experts;
  j["num_experts_per_tok"] = m.moe.moe_router_topk;
  j["router_aux_loss_coef"] = m.moe.moe_aux_loss_coeff;
  j["swiglu_limit"] = m.activation_func_clamp_value;
  j["swiglu_alpha"] = kAlpha;
  const int64_t window = m.attention_window();
  j["sliding_window"] = window > 0 ? Json(window) : Json(nullptr);
  Json types = Json::array();
  for (int64_t l = 0; l < m.num_layers; ++l)
    types.push_back(m.layer_window(l) > 0 ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  write_dtype_and_pad(m, dtype, j);
  // transformers 5's spelling with the rope type always written: GptOssConfig takes YaRN for a
  // config.json that names no rope type (rope_scaling null), which this model may not have.
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = Json::object();
  write_rope(m, j);
  return j;
}

std::vector<TensorMapping> gpt_oss_mappings(const config::ModelConfig& m, int64_t Vp) {
  const auto& e = m.moe;
  MT_INPUT_CHECK(
      m.softmax_type == config::SoftmaxType::Learnable &&
          m.activation == config::Activation::QuickGeGLU && m.glu_linear_offset == 1.0 &&
          m.activation_func_clamp_value > 0 && m.add_bias && e.enabled() &&
          e.moe_router_score_function == config::MoeScoreFunction::Softmax &&
          !e.moe_router_pre_softmax && e.moe_router_num_groups == 0 &&
          !e.moe_router_topk_scaling_factor && !e.moe_router_enable_expert_bias &&
          e.moe_shared_expert_intermediate_size == 0 && every_layer_routed(m) &&
          m.normalization == config::Normalization::RMSNorm && m.rotary() && !m.qk_layernorm &&
          !m.sublayer_output_norm && gemma_only_feature(m).empty(),
      kGptOss,
      " has learned attention sinks, biases on every projection, RMSNorms before the "
      "sub-layers, rope, and in every layer experts of the clamped quick-GELU unit (offset 1) "
      "behind a softmax router over the top-k logits, without groups, scaling, expert bias or "
      "a shared expert: this model is not one");
  std::vector<TensorMapping> out;
  out.push_back(embed_tokens_weight(m, Vp));
  for (int64_t l = 0; l < m.num_layers; ++l) {
    attention(out, m, l);
    experts(out, m, l);
  }
  final_norm_and_head(out, m, Vp);
  return out;
}

std::vector<hf::FusedExperts> gpt_oss_fused_experts(const config::ModelConfig& m) {
  const int64_t D = m.hidden_size, E = m.moe.num_experts, F = m.moe.expert_ffn(m.ffn());
  std::vector<hf::FusedExperts> out;
  for (int64_t l = 0; l < m.num_layers; ++l) {
    const std::string x = concat("model.layers.", l, ".mlp.experts.");
    out.push_back({x + "gate_up_proj", E, vec({D, 2 * F}), {}});
    out.push_back({x + "gate_up_proj_bias", E, vec({F, 2}), vec({2 * F})});
    out.push_back({x + "down_proj", E, vec({F, D}), {}});
    out.push_back({x + "down_proj_bias", E, vec({D}), {}});
  }
  return out;
}

std::set<std::string> gpt_oss_ignored_tensors(const config::ModelConfig& m) {
  return llama_style_ignored_tensors(m);
}

}  // namespace megatron::models
