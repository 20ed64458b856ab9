// mpirun-np: 2 4
// Multi-latent attention (DeepSeek-V2/V3's; megatron/transformer/mla.h) in every layout: its
// down projections and latent norms are replicated over tensor parallelism (under sequence
// parallelism each rank's query path sees its own tokens, so their gradients are tp partial
// sums; the latent is gathered along the sequence and its rope key's gradient summed over the
// heads of every rank), its up projections split by heads. tp with and without sequence
// parallelism, pp 1F1B and interleaved, dp under each sharding strategy, recompute, context
// parallelism (p2p, all_gather, a2a), bf16, and DeepSeek-V3's MoE around it (sigmoid routing
// with the expert bias, group-limited top-k, a scaling factor, a shared expert, the first layer
// dense) under ep: the single-process loss and gradient-norm curve within fp32 round-off.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

// Heads 4 of qk 8 + rope 4, values 6 (padded to 12 in the core), latents 8 and 12: rows of 2.
eq::RecipeSpec mla(bool q_lora = true, int64_t layers = 4) {
  eq::RecipeSpec m{.arch = "llama", .layers = layers, .ffn = 48};
  m.model_extra = std::string("multi_latent_attention: true, q_lora_rank: ") +
                  (q_lora ? "12" : "0") +
                  ", kv_lora_rank: 8, qk_head_dim: 8, qk_pos_emb_head_dim: 4, v_head_dim: 6, "
                  "layernorm_epsilon: 1.0e-6";
  m.micro = 4;
  m.iters = 10;
  m.seed = 31;
  m.lr = 0.01;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(MlaEquivalence, ModelLayoutsMatchSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(mla(), tokens(), eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("mla layouts");
}

TEST(MlaEquivalence, PlainQueriesShardingAndRecomputeMatchSingleProcess) {
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.dp = 2, .micro = 2, .sharding = "optim_grads"},
      {.dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.pp = 2, .micro = 2, .recompute = "full"},
      {.tp = 2, .dp = 2, .micro = 2, .sp = true, .sharding = "optim_grads_params"},
  };
  EXPECT_GT(eq::expect_layouts_match(mla(false), tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("mla plain queries / sharding / recompute");
}

TEST(MlaEquivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = mla();
  m.heads = 8;  // a2a over tp x cp = 4
  m.seq = 32;
  EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("mla context parallel");
}

// DeepSeek-V3's layer stack in small: MLA everywhere, the first layer's MLP dense, the others
// sigmoid-routed top-2 of 8 experts in 4 groups (2 groups a token), scaled by 2.5, with the
// aux-loss-free expert bias and a shared expert.
TEST(MlaEquivalence, DeepSeekV3MoeLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = mla();
  m.model_extra +=
      ", num_experts: 8, moe_ffn_hidden_size: 16, moe_router_topk: 2, "
      "moe_router_score_function: sigmoid, moe_router_enable_expert_bias: true, "
      "moe_router_bias_update_rate: 0.01, moe_router_num_groups: 4, moe_router_group_topk: 2, "
      "moe_router_topk_scaling_factor: 2.5, moe_shared_expert_intermediate_size: 16, "
      "moe_layer_freq: [0, 1, 1, 1], moe_router_load_balancing_type: seq_aux_loss, "
      "moe_aux_loss_coeff: 0.001";
  m.micro = 2;
  const std::vector<eq::Layout> layouts = {
      {.dp = 2, .micro = 1, .ep = 2},
      {.tp = 2, .micro = 2, .sp = true, .ep = 2, .etp = 1},
      {.pp = 2, .micro = 2},
      {.tp = 2, .dp = 2, .micro = 1, .sp = true, .distributed = true, .ep = 2},
      {.dp = 4, .micro = 1, .ep = 4, .sharding = "optim_grads_params"},
  };
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("mla deepseek-v3 moe");
}

// bf16 mixed precision, within the bf16 tolerances of the other equivalence tests.
TEST(MlaEquivalence, Bf16LayoutsTrackSingleProcess) {
  eq::RecipeSpec m = mla();
  m.precision = "bf16";
  m.lr = 0.005;
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.pp = 2, .micro = 2},
      {.tp = 2, .dp = 2, .micro = 2, .distributed = true},
  };
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts, eq::Tolerance{2e-3, 3e-2}), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("mla bf16");
}

}  // namespace
}  // namespace megatron
