#pragma once
// The mixture-of-experts keys of the model section (Megatron-Core's names). With num_experts > 0
// the MLP of the layers moe_layer_freq picks is a routed MoE layer
// (megatron/transformer/moe/moe_layer.h); 0 keeps every MLP dense.
#include <cstdint>
#include <optional>
#include <vector>

#include "megatron/config/key_info.h"
#include "megatron/config/options.h"

namespace megatron::config {

struct KeyOrigins;

// model.moe_layer_freq: an integer N (every N-th layer, from layer 0: Megatron's
// `layer % N == 0`) or an explicit list of 0/1 per layer.
struct LayerFrequency {
  int64_t every = 1;
  std::vector<int64_t> pattern;  // non-empty: one 0/1 per layer
  bool is_moe(int64_t layer) const {
    return pattern.empty() ? layer % every == 0 : pattern.at(static_cast<size_t>(layer)) != 0;
  }
  bool operator==(const LayerFrequency&) const = default;
};

struct MoeConfig {
  int64_t num_experts = 0;          // 0 -> dense MLP; > 0 -> routed experts per MoE layer
  int64_t moe_ffn_hidden_size = 0;  // 0 -> model.ffn_hidden_size
  int64_t moe_router_topk = 2;      // experts per token
  LayerFrequency moe_layer_freq;
  int64_t moe_shared_expert_intermediate_size = 0;  // 0 -> no shared expert
  bool moe_shared_expert_gate = false;  // scale the shared expert by sigmoid(x . w) per token
  MoeScoreFunction moe_router_score_function = MoeScoreFunction::Softmax;
  bool moe_router_pre_softmax = false;  // softmax over all experts before the top-k
  int64_t moe_router_num_groups = 0;    // group-limited routing: groups of experts (0 = off)
  int64_t moe_router_group_topk = 0;    // groups a token may use
  std::optional<double> moe_router_topk_scaling_factor;
  MoeLoadBalancing moe_router_load_balancing_type = MoeLoadBalancing::AuxLoss;
  double moe_aux_loss_coeff = 0.0;
  double moe_z_loss_coeff = 0.0;
  bool moe_router_enable_expert_bias = false;  // aux-loss-free balancing
  double moe_router_bias_update_rate = 1e-3;
  std::optional<double> moe_expert_capacity_factor;  // unset -> dropless
  MoeTokenDropPolicy moe_token_drop_policy = MoeTokenDropPolicy::Probs;
  bool moe_pad_expert_input_to_capacity = false;

  bool enabled() const { return num_experts > 0; }
  int64_t expert_ffn(int64_t dense_ffn) const {
    return moe_ffn_hidden_size > 0 ? moe_ffn_hidden_size : dense_ffn;
  }
  // Checked by ModelConfig::validate (moe_config.cpp) against the model's layer count and arch.
  void validate(const KeyOrigins& origins, int64_t num_layers, Arch arch) const;
  bool operator==(const MoeConfig&) const = default;

  // Flattened into the model section (model.num_experts, model.moe_router_topk, ...).
  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("num_experts", s.num_experts, noted(s.num_experts == 0 ? "dense" : ""));
    v("moe_ffn_hidden_size", s.moe_ffn_hidden_size,
      noted(s.moe_ffn_hidden_size == 0 ? "auto: ffn_hidden_size" : ""));
    v("moe_router_topk", s.moe_router_topk);
    v("moe_layer_freq", s.moe_layer_freq);
    v("moe_shared_expert_intermediate_size", s.moe_shared_expert_intermediate_size,
      noted(s.moe_shared_expert_intermediate_size == 0 ? "no shared expert" : ""));
    v("moe_shared_expert_gate", s.moe_shared_expert_gate);
    v("moe_router_score_function", s.moe_router_score_function);
    v("moe_router_pre_softmax", s.moe_router_pre_softmax);
    v("moe_router_num_groups", s.moe_router_num_groups);
    v("moe_router_group_topk", s.moe_router_group_topk);
    v("moe_router_topk_scaling_factor", s.moe_router_topk_scaling_factor);
    v("moe_router_load_balancing_type", s.moe_router_load_balancing_type);
    v("moe_aux_loss_coeff", s.moe_aux_loss_coeff);
    v("moe_z_loss_coeff", s.moe_z_loss_coeff);
    v("moe_router_enable_expert_bias", s.moe_router_enable_expert_bias);
    v("moe_router_bias_update_rate", s.moe_router_bias_update_rate);
    v("moe_expert_capacity_factor", s.moe_expert_capacity_factor,
      noted(s.moe_expert_capacity_factor ? "" : "dropless"));
    v("moe_token_drop_policy", s.moe_token_drop_policy);
    v("moe_pad_expert_input_to_capacity", s.moe_pad_expert_input_to_capacity);
  }
};

}  // namespace megatron::config
