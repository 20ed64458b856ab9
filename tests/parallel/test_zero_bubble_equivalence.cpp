// mpirun-np: 2 4 8
// ZB-H1 (parallel.pipeline_schedule: zb_h1; every backward split into B and a deferred W)
// reproduces the single-process loss curve over 20 steps in fp32 at pp 2, 4 and 8, alone and with
// tp + sp, dp under no_shard and the distributed optimizer, full recompute, MoE with expert
// parallelism, and in bf16. On one layout its losses and gradient norms equal 1F1B's bit for
// bit: a stage runs its W's in micro-batch order, so every gradient sums in the same order.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

eq::RecipeSpec dense_model() {
  eq::RecipeSpec model;
  model.layers = 8;
  model.dropout = 0.1;
  model.seed = 21;
  return model;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{104729, 11, 7, 3});
}

TEST(ZeroBubbleH1, MatchesSingleProcess) {
  const std::string zb = "zb_h1";
  const std::vector<eq::Layout> layouts = {
      // 2 ranks
      {.pp = 2, .micro = 2, .schedule = zb},
      {.pp = 2, .micro = 1, .schedule = zb},
      {.pp = 2, .micro = 2, .recompute = "full", .schedule = zb},
      // 4 ranks
      {.pp = 4, .micro = 1, .schedule = zb},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true, .schedule = zb},
      {.pp = 2, .dp = 2, .micro = 1, .schedule = zb},
      {.pp = 2, .dp = 2, .micro = 2, .distributed = true, .schedule = zb},
      // 8 ranks
      {.pp = 8, .micro = 1, .schedule = zb},
      {.tp = 2, .pp = 2, .dp = 2, .micro = 1, .sp = true, .distributed = true, .schedule = zb},
  };
  EXPECT_GT(eq::expect_layouts_match(dense_model(), tokens(), layouts), 0)
      << "no layout for " << world().size() << " ranks";
  eq::report_max_diff("zb_h1 equivalence");
}

TEST(ZeroBubbleH1, EqualsOneFOneBBitForBit) {
  const int n = world().size();
  eq::Layout layout = n == 2   ? eq::Layout{.pp = 2, .micro = 1}
                      : n == 4 ? eq::Layout{.tp = 2, .pp = 2, .micro = 1, .sp = true}
                               : eq::Layout{.tp = 2, .pp = 2, .dp = 2, .micro = 1, .sp = true};
  const auto one_f_one_b =
      eq::train_on_world(eq::make_recipe(layout.applied_to(dense_model())), tokens(), tokens());
  layout.schedule = "zb_h1";
  const auto zero_bubble =
      eq::train_on_world(eq::make_recipe(layout.applied_to(dense_model())), tokens(), tokens());
  ASSERT_EQ(zero_bubble.steps.size(), one_f_one_b.steps.size());
  for (size_t i = 0; i < one_f_one_b.steps.size(); ++i) {
    EXPECT_EQ(zero_bubble.steps[i].loss, one_f_one_b.steps[i].loss) << "step " << i;
    EXPECT_EQ(zero_bubble.steps[i].grad_norm, one_f_one_b.steps[i].grad_norm) << "step " << i;
  }
}

TEST(ZeroBubbleH1, MoeWithExpertParallelism) {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  m.model_extra =
      "num_experts: 4, moe_ffn_hidden_size: 24, moe_router_topk: 2, moe_aux_loss_coeff: 0.01";
  m.micro = 2;
  m.seed = 13;
  const std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2, .schedule = "zb_h1"},
      {.pp = 2, .dp = 2, .micro = 2, .ep = 2, .schedule = "zb_h1"},
  };
  const auto source = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  if (world().size() > 4) GTEST_SKIP() << "MoE zb_h1 layouts are for 2 and 4 ranks";
  EXPECT_GT(eq::expect_layouts_match(m, source, layouts), 0);
  eq::report_max_diff("zb_h1 moe");
}

TEST(ZeroBubbleH1, Bf16TracksSingleProcess) {
  eq::RecipeSpec m = dense_model();
  m.precision = "bf16";
  m.iters = 10;
  const std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2, .schedule = "zb_h1"},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true, .schedule = "zb_h1"},
  };
  if (world().size() > 4) GTEST_SKIP() << "bf16 zb_h1 layouts are for 2 and 4 ranks";
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts, eq::Tolerance{2e-3, 3e-2}), 0);
  eq::report_max_diff("zb_h1 bf16");
}

}  // namespace
}  // namespace megatron
