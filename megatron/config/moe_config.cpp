#include "megatron/config/moe_config.h"

#include "megatron/config/checker.h"

namespace megatron::config {

void MoeConfig::validate(const KeyOrigins& origins, int64_t num_layers, Arch arch) const {
  Checker c(origins);
  c.non_negative("model.num_experts", num_experts);
  if (num_experts == 0) return;
  const int64_t E = num_experts;
  c.check(arch != Arch::BERT, "model.num_experts",
          concat("mixture-of-experts layers are for gpt and llama models (got ", E,
                 " experts with arch bert)"));
  c.check(
      moe_router_topk >= 1 && moe_router_topk <= E, "model.moe_router_topk",
      concat("must be in [1, model.num_experts] (got ", moe_router_topk, " with ", E, " experts)"));
  c.non_negative("model.moe_ffn_hidden_size", moe_ffn_hidden_size);
  c.non_negative("model.moe_shared_expert_intermediate_size", moe_shared_expert_intermediate_size);
  c.check(!moe_shared_expert_gate || moe_shared_expert_intermediate_size > 0,
          "model.moe_shared_expert_gate",
          "needs a shared expert (model.moe_shared_expert_intermediate_size > 0)");
  const LayerFrequency& f = moe_layer_freq;
  if (f.pattern.empty()) {
    c.check(f.every >= 1, "model.moe_layer_freq", concat("must be >= 1 (got ", f.every, ")"));
  } else {
    c.check(static_cast<int64_t>(f.pattern.size()) == num_layers, "model.moe_layer_freq",
            concat("a list needs one 0/1 entry per layer (got ", f.pattern.size(), " entries for ",
                   num_layers, " layers)"));
    bool any = false;
    for (size_t i = 0; i < f.pattern.size(); ++i) {
      c.check(f.pattern[i] == 0 || f.pattern[i] == 1, concat("model.moe_layer_freq[", i, "]"),
              concat("must be 0 or 1 (got ", f.pattern[i], ")"));
      any = any || f.pattern[i] == 1;
    }
    c.check(any, "model.moe_layer_freq", "selects no layer (use num_experts: 0 for a dense model)");
  }
  if (moe_router_num_groups > 0 || moe_router_group_topk > 0) {
    const int64_t groups = moe_router_num_groups;
    c.check(groups > 0, "model.moe_router_num_groups",
            concat("must be > 0 when moe_router_group_topk is set (got ", groups, ")"));
    c.divisible("model.num_experts", E, "model.moe_router_num_groups", groups);
    c.check(moe_router_group_topk >= 1 && moe_router_group_topk <= groups,
            "model.moe_router_group_topk",
            concat("must be in [1, moe_router_num_groups] (got ", moe_router_group_topk, " with ",
                   groups, " groups)"));
    // Megatron scores a group by the sum of its best topk / group_topk experts.
    c.check(moe_router_topk % moe_router_group_topk == 0 &&
                moe_router_topk / moe_router_group_topk <= E / groups,
            "model.moe_router_topk",
            concat("must be a multiple of moe_router_group_topk with at most num_experts / "
                   "moe_router_num_groups per group (got topk ",
                   moe_router_topk, ", group_topk ", moe_router_group_topk, ", ", E / groups,
                   " experts per group)"));
  }
  if (moe_router_topk_scaling_factor)
    c.positive("model.moe_router_topk_scaling_factor", *moe_router_topk_scaling_factor);
  c.non_negative("model.moe_aux_loss_coeff", moe_aux_loss_coeff);
  c.non_negative("model.moe_z_loss_coeff", moe_z_loss_coeff);
  c.non_negative("model.moe_router_bias_update_rate", moe_router_bias_update_rate);
  // With a softmax after the top-k the bias would shift logits, not choose among scores.
  c.check(!moe_router_enable_expert_bias ||
              moe_router_score_function == MoeScoreFunction::Sigmoid || moe_router_pre_softmax,
          "model.moe_router_enable_expert_bias",
          "needs moe_router_score_function: sigmoid or moe_router_pre_softmax: true (the bias "
          "shifts the scores the top-k chooses from)");
  if (moe_expert_capacity_factor)
    c.positive("model.moe_expert_capacity_factor", *moe_expert_capacity_factor);
  c.check(!moe_pad_expert_input_to_capacity || moe_expert_capacity_factor.has_value(),
          "model.moe_pad_expert_input_to_capacity",
          "needs model.moe_expert_capacity_factor (padding is to the capacity)");
}

}  // namespace megatron::config
