// mpirun-np: 2 4
// An OLMo-2-like tiny model: RMSNorms on the sub-layers' outputs only (model.sublayer_output_norm
// without input norms) and q/k RMSNorms over each token's whole query and key projections
// (qk_layernorm_span: projection: under tensor parallelism their statistics are all-reduced over
// the tp ranks, forward and backward), grouped queries (llama: an untied head). Every model layout
// (tp + sp, pp 1F1B and interleaved, dp with the distributed optimizer and ZeRO-3), recompute,
// LoRA and context parallelism must give the single-process loss and gradient-norm curve.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec olmo2() {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .hidden = 32, .heads = 4, .groups = 2, .ffn = 48};
  // init std 0.1: at 0.02 the branch outputs are so small that their output norms magnify the
  // layouts' different fp32 summation orders to ~1e-4 of the gradient norm over 20 steps.
  m.model_extra =
      "qk_layernorm: true, qk_layernorm_span: projection, sublayer_input_norm: false, "
      "sublayer_output_norm: true, init_method_std: 0.1";
  m.dropout = 0.1;
  m.micro = 4;
  m.iters = 20;
  m.seed = 37;
  m.lr = 0.001;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(Olmo2Equivalence, ModelLayoutsMatchSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(olmo2(), tokens(), eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("olmo2 layouts");
}

TEST(Olmo2Equivalence, RecomputeShardingAndLora) {
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.tp = 2, .micro = 2, .recompute = "full"},
      {.pp = 2, .micro = 2, .recompute = "full"},
      {.dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.tp = 2, .dp = 2, .micro = 2, .sp = true, .sharding = "optim_grads_params"},
  };
  EXPECT_GT(eq::expect_layouts_match(olmo2(), tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::RecipeSpec lora = olmo2();
  lora.extra_sections = "peft: {type: lora, dim: 4, alpha: 8}\n";
  lora.lr = 0.01;  // the adapters alone: a larger step to see the loss fall
  EXPECT_GT(eq::expect_layouts_match(lora, tokens(), eq::family_lora_layouts()), 0);
  eq::report_max_diff("olmo2 recompute, sharding, lora");
}

TEST(Olmo2Equivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = olmo2();
  m.heads = 8;  // 4 groups: a2a splits them over tp x cp = 4 ranks
  m.groups = 4;
  m.dropout = 0;
  m.seq = 32;
  EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("olmo2 context parallel");
}

}  // namespace
}  // namespace megatron
