// mpirun-np: 2 4
// A GPT-NeoX / Pythia-like tiny model: the parallel residual (model.parallel_residual: attention
// and MLP side by side on the block input, each through its own layer norm), a quarter of each
// head turning (model.rotary_percent 0.25), biases everywhere, an untied head, dropout on. Every
// model layout (tp + sp, pp 1F1B and interleaved, dp with the distributed optimizer and ZeRO-3),
// recompute, LoRA and context parallelism must give the single-process loss and gradient-norm
// curve.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec neox() {
  eq::RecipeSpec m{.arch = "gpt", .layers = 4, .hidden = 32, .heads = 4, .ffn = 64};
  m.model_extra =
      "position_embedding: rope, rotary_percent: 0.25, parallel_residual: true, "
      "activation: gelu_exact, tie_embeddings: false";
  m.dropout = 0.1;
  m.micro = 4;
  m.iters = 10;
  m.seed = 31;
  m.lr = 0.01;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(NeoXEquivalence, ModelLayoutsMatchSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(neox(), tokens(), eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("neox layouts");
}

TEST(NeoXEquivalence, RecomputeShardingAndLora) {
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.pp = 2, .micro = 2, .recompute = "full"},
      {.dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.tp = 2, .dp = 2, .micro = 2, .sharding = "optim_grads_params"},
  };
  EXPECT_GT(eq::expect_layouts_match(neox(), tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::RecipeSpec lora = neox();
  lora.extra_sections = "peft: {type: lora, dim: 4, alpha: 8}\n";
  EXPECT_GT(eq::expect_layouts_match(lora, tokens(), eq::family_lora_layouts()), 0);
  eq::report_max_diff("neox recompute, sharding, lora");
}

TEST(NeoXEquivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = neox();
  m.dropout = 0;
  m.seq = 32;
  EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("neox context parallel");
}

}  // namespace
}  // namespace megatron
