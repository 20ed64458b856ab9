#include "models/gpt/hf_moe.h"

#include <algorithm>

#include "megatron/core/error.h"
#include "megatron/core/format.h"
#include "models/gpt/hf_common.h"

namespace megatron::models {
namespace {

using Json = nlohmann::ordered_json;

std::vector<int64_t> vec(std::initializer_list<int64_t> v) { return v; }

bool is_qwen_moe(const std::string& a) { return a == kQwen2Moe || a == kQwen3Moe; }

// Qwen's routed layers: l + 1 a multiple of decoder_sparse_step and l not in mlp_only_layers.
config::LayerFrequency read_qwen_moe_layers(const hf::ConfigJson& c, int64_t layers) {
  const int64_t step = c.integer_or("decoder_sparse_step", 1);
  if (step < 1) c.fail("decoder_sparse_step", concat("must be >= 1 (got ", step, ")"));
  std::vector<int64_t> pattern(static_cast<size_t>(layers), 0);
  for (int64_t l = 0; l < layers; ++l) pattern[size_t(l)] = (l + 1) % step == 0 ? 1 : 0;
  if (c.has("mlp_only_layers") && !c.json()["mlp_only_layers"].is_null()) {
    const auto& list = c.json()["mlp_only_layers"];
    if (!list.is_array()) c.fail("mlp_only_layers", "must be a list of layer indices");
    for (const auto& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= layers)
        c.fail("mlp_only_layers", concat("has ", v.dump(), " (layer indices in [0, ", layers,
                                         "): num_hidden_layers)"));
      pattern[size_t(v.get<int64_t>())] = 0;
    }
  }
  if (std::find(pattern.begin(), pattern.end(), 1) == pattern.end())
    c.fail("mlp_only_layers", "with decoder_sparse_step leaves no layer with experts");
  if (std::find(pattern.begin(), pattern.end(), 0) == pattern.end()) return {1, {}};
  return {1, pattern};
}

void read_qwen_moe(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  config::MoeConfig& moe = m.moe;
  // (transformers 5 names Qwen3-MoE's count num_local_experts; the released configs num_experts)
  const bool local = c.has("num_local_experts");
  moe.num_experts = c.integer(local && !c.has("num_experts") ? "num_local_experts" : "num_experts");
  if (local && c.has("num_experts") && c.integer("num_local_experts") != moe.num_experts)
    c.fail("num_local_experts",
           concat(c.integer("num_local_experts"), " differs from num_experts ", moe.num_experts));
  moe.moe_router_topk = c.integer("num_experts_per_tok");
  moe.moe_ffn_hidden_size = c.integer("moe_intermediate_size");
  moe.moe_router_pre_softmax = !c.boolean_or("norm_topk_prob", false);
  moe.moe_aux_loss_coeff = c.number_or("router_aux_loss_coef", 0.001);
  moe.moe_layer_freq = read_qwen_moe_layers(c, m.num_layers);
  if (arch != kQwen2Moe) return;
  moe.moe_shared_expert_intermediate_size = c.integer("shared_expert_intermediate_size");
  if (moe.moe_shared_expert_intermediate_size <= 0)
    c.fail("shared_expert_intermediate_size",
           concat("must be > 0 (got ", moe.moe_shared_expert_intermediate_size, ")"));
  moe.moe_shared_expert_gate = true;
  m.add_qkv_bias = c.boolean_or("qkv_bias", true);
}

}  // namespace

bool is_hf_moe_decoder(const std::string& a) { return a == kMixtral || is_qwen_moe(a); }

std::set<std::string> moe_config_keys(const std::string& arch) {
  if (arch == kMixtral)
    return {"num_local_experts", "num_experts_per_tok", "router_aux_loss_coef",
            "router_jitter_noise", "output_router_logits"};
  std::set<std::string> keys = {
      "num_experts",           "num_local_experts",   "num_experts_per_tok",
      "moe_intermediate_size", "norm_topk_prob",      "router_aux_loss_coef",
      "output_router_logits",  "decoder_sparse_step", "mlp_only_layers"};
  if (arch == kQwen2Moe) keys.insert({"shared_expert_intermediate_size", "qkv_bias"});
  return keys;
}

void read_moe_config(const hf::ConfigJson& c, const std::string& arch, config::ModelConfig& m) {
  MT_CHECK(is_hf_moe_decoder(arch), "not an MoE decoder: ", arch);
  m.moe.moe_router_load_balancing_type = config::MoeLoadBalancing::AuxLoss;
  if (is_qwen_moe(arch)) return read_qwen_moe(c, arch, m);
  m.moe.num_experts = c.integer("num_local_experts");
  m.moe.moe_router_topk = c.integer("num_experts_per_tok");
  m.moe.moe_ffn_hidden_size = m.ffn_hidden_size;
  m.moe.moe_aux_loss_coeff = c.number_or("router_aux_loss_coef", 0.0);
  if (c.number_or("router_jitter_noise", 0.0) != 0.0)
    c.fail("router_jitter_noise", "non-zero jitter is not implemented");
}

std::string moe_architecture_for(const config::ModelConfig& m) {
  if (m.moe.moe_shared_expert_gate) return kQwen2Moe;
  if (m.qk_layernorm) return kQwen3Moe;
  return kMixtral;
}

void check_moe_exportable(const std::string& arch, const config::ModelConfig& m) {
  const config::MoeConfig& e = m.moe;
  if (!e.enabled()) return;
  MT_INPUT_CHECK(is_hf_moe_decoder(arch), arch,
                 " has no experts (MixtralForCausalLM, Qwen2MoeForCausalLM and "
                 "Qwen3MoeForCausalLM do)");
  MT_INPUT_CHECK(e.moe_router_score_function == config::MoeScoreFunction::Softmax &&
                     e.moe_router_num_groups == 0 && !e.moe_router_topk_scaling_factor &&
                     !e.moe_router_enable_expert_bias,
                 arch,
                 " routes by a softmax over all experts without groups, scaling or an expert "
                 "bias: a model with moe_router_score_function sigmoid, moe_router_num_groups, "
                 "moe_router_topk_scaling_factor or moe_router_enable_expert_bias is not one");
  MT_INPUT_CHECK(arch == kQwen2Moe || !m.add_qkv_bias, arch,
                 " has no q/k/v biases (model.add_qkv_bias converts as Qwen2MoeForCausalLM)");
  MT_INPUT_CHECK(arch == kQwen2Moe || e.moe_shared_expert_intermediate_size == 0, arch,
                 " has no shared expert (model.moe_shared_expert_intermediate_size ",
                 e.moe_shared_expert_intermediate_size, ")");
  MT_INPUT_CHECK(
      arch != kQwen2Moe || (e.moe_shared_expert_intermediate_size > 0 && e.moe_shared_expert_gate),
      arch,
      " has a shared expert with a sigmoid gate in every routed layer: it needs "
      "model.moe_shared_expert_intermediate_size > 0 and moe_shared_expert_gate: true");
  MT_INPUT_CHECK(arch != kMixtral || (!e.moe_router_pre_softmax && every_layer_routed(m)), arch,
                 " routes every layer and renormalizes the top-k probabilities: a model with "
                 "moe_router_pre_softmax or dense layers (moe_layer_freq) converts as "
                 "Qwen3MoeForCausalLM or Qwen2MoeForCausalLM");
}

void write_moe_config(const config::ModelConfig& m, const std::string& arch, Json& j) {
  const config::MoeConfig& e = m.moe;
  if (arch == kMixtral) {
    j["num_local_experts"] = e.num_experts;
    j["num_experts_per_tok"] = e.moe_router_topk;
    j["router_aux_loss_coef"] = e.moe_aux_loss_coeff;
    return;
  }
  j["intermediate_size"] = m.ffn();
  j[j.contains("num_local_experts") && !j.contains("num_experts") ? "num_local_experts"
                                                                  : "num_experts"] = e.num_experts;
  j["num_experts_per_tok"] = e.moe_router_topk;
  j["moe_intermediate_size"] = e.expert_ffn(m.ffn());
  j["norm_topk_prob"] = !e.moe_router_pre_softmax;
  j["router_aux_loss_coef"] = e.moe_aux_loss_coeff;
  // The original's step where the routed layers allow it, the dense ones among them listed.
  int64_t step = j.value("decoder_sparse_step", int64_t{1});
  for (int64_t l = 0; l < m.num_layers; ++l)
    if (e.moe_layer_freq.is_moe(l) && (step < 1 || (l + 1) % step != 0)) step = 1;
  Json dense = Json::array();
  for (int64_t l = 0; l < m.num_layers; ++l)
    if ((l + 1) % step == 0 && !e.moe_layer_freq.is_moe(l)) dense.push_back(l);
  j["decoder_sparse_step"] = step;
  j["mlp_only_layers"] = dense;
  if (arch == kQwen2Moe) {
    j["shared_expert_intermediate_size"] = e.moe_shared_expert_intermediate_size;
    j["qkv_bias"] = m.add_qkv_bias;
  }
}

void moe_decoder_mlp(std::vector<hf::TensorMapping>& out, const std::string& arch,
                     const config::ModelConfig& m, int64_t l) {
  const int64_t D = m.hidden_size, E = m.moe.num_experts, Fe = m.moe.expert_ffn(m.ffn());
  const std::string n = concat("layers.", l, ".mlp."), h = concat("model.layers.", l, ".");
  if (!m.moe.moe_layer_freq.is_moe(l)) return gated_mlp_weights(out, n, h + "mlp.", D, m.ffn());
  const bool mixtral = arch == kMixtral;
  const std::string e = h + (mixtral ? "block_sparse_moe." : "mlp.");
  out.push_back(hf::copy_mapping(n + "router.weight", vec({E, D}), e + "gate.weight"));
  for (int64_t x = 0; x < E; ++x) {
    const std::string ex = concat(e, "experts.", x, "."), nx = concat(n, "experts.", x, ".");
    if (!mixtral) {
      gated_mlp_weights(out, nx, ex, D, Fe);
      continue;
    }
    out.push_back(
        hf::stacked_mapping(nx + "fc1.weight", vec({2, Fe, D}),
                            {{ex + "w1.weight", vec({Fe, D})}, {ex + "w3.weight", vec({Fe, D})}}));
    out.push_back(hf::copy_mapping(nx + "fc2.weight", vec({D, Fe}), ex + "w2.weight"));
  }
  const int64_t Fs = m.moe.moe_shared_expert_intermediate_size;
  if (Fs == 0) return;
  gated_mlp_weights(out, n + "shared_experts.", e + "shared_expert.", D, Fs);
  if (m.moe.moe_shared_expert_gate)
    out.push_back(hf::copy_mapping(n + "shared_experts.gate_weight", vec({1, D}),
                                   e + "shared_expert_gate.weight"));
}

}  // namespace megatron::models
