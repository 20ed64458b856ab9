#include "megatron/transformer/moe/moe_spec.h"

namespace megatron::moe {

MoeSpec moe_spec_from_config(const config::MoeConfig& c, int64_t dense_ffn, bool linear_bias) {
  MoeSpec s;
  s.router.num_experts = c.num_experts;
  s.router.topk = c.moe_router_topk;
  s.router.score = c.moe_router_score_function;
  s.router.pre_softmax = c.moe_router_pre_softmax;
  s.router.num_groups = c.moe_router_num_groups;
  s.router.group_topk = c.moe_router_group_topk;
  s.router.scaling_factor = static_cast<float>(c.moe_router_topk_scaling_factor.value_or(1.0));
  s.router.balancing = c.moe_router_load_balancing_type;
  s.router.aux_loss_coeff = static_cast<float>(c.moe_aux_loss_coeff);
  s.router.z_loss_coeff = static_cast<float>(c.moe_z_loss_coeff);
  s.expert_ffn = c.expert_ffn(dense_ffn);
  s.shared_ffn = c.moe_shared_expert_intermediate_size;
  s.shared_gate = c.moe_shared_expert_gate;
  s.layers = c.moe_layer_freq;
  s.capacity_factor = c.moe_expert_capacity_factor;
  s.drop_policy = c.moe_token_drop_policy;
  s.pad_to_capacity = c.moe_pad_expert_input_to_capacity;
  s.expert_bias = c.moe_router_enable_expert_bias;
  s.bias_update_rate = static_cast<float>(c.moe_router_bias_update_rate);
  s.linear_bias = linear_bias;
  return s;
}

MoeLayerStats& MoeState::stats(int64_t layer) {
  MoeLayerStats& s = stats_[layer];
  if (s.tokens_per_expert.empty())
    s.tokens_per_expert.assign(static_cast<size_t>(spec_.router.num_experts), 0.0);
  return s;
}

std::map<int64_t, std::vector<double>>& MoeState::global_counts(int64_t layer, int64_t iteration) {
  GlobalCounts& g = global_[layer];
  if (g.iteration != iteration) {
    g.iteration = iteration;
    g.by_micro_batch.clear();
  }
  return g.by_micro_batch;
}

std::vector<double> MoeState::mean_global_counts(int64_t layer, int64_t batch_offset) const {
  std::vector<double> mean(static_cast<size_t>(spec_.router.num_experts), 0.0);
  const auto it = global_.find(layer);
  if (it == global_.end()) return mean;
  double n = 0;
  for (const auto& [offset, counts] : it->second.by_micro_batch) {
    if (offset > batch_offset) break;
    for (size_t e = 0; e < mean.size(); ++e) mean[e] += counts[e];
    n += 1;
  }
  if (n > 0)
    for (double& v : mean) v /= n;
  return mean;
}

std::vector<float>& MoeState::expert_bias(int64_t layer) {
  std::vector<float>& b = bias_[layer];
  if (b.empty()) b.assign(static_cast<size_t>(spec_.router.num_experts), 0.0f);
  return b;
}

}  // namespace megatron::moe
