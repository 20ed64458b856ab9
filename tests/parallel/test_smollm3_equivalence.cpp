// mpirun-np: 2 4
// A SmolLM3-like tiny model: NoPE layers (model.no_rope_freq), here layers 1 and 3 of 4 without
// rotary embeddings. Whether a layer applies rope follows its global index, so pipeline stages
// (1F1B and interleaved) must pick the same layers as the single process; every model layout and
// context parallelism (whose rope counts positions over the whole sequence) must give the
// single-process loss and gradient-norm curve.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec smollm3(const std::string& no_rope = "2") {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  m.model_extra = "no_rope_freq: " + no_rope;
  m.micro = 4;
  m.iters = 10;
  m.seed = 29;
  m.lr = 0.01;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(SmolLM3Equivalence, ModelLayoutsMatchSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(smollm3(), tokens(), eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("smollm3 layouts");
}

// A list that is not periodic (layers 0 and 3), so a stage that counted its layers from 0
// would pick others.
TEST(SmolLM3Equivalence, NopeListAcrossPipelineStages) {
  const std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2},
      {.pp = 2, .vpp = 2, .micro = 2},
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.pp = 4, .micro = 4},  // one layer per stage
      {.tp = 2, .pp = 2, .micro = 2},
  };
  EXPECT_GT(eq::expect_layouts_match(smollm3("[1, 0, 0, 1]"), tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("smollm3 nope list");
}

TEST(SmolLM3Equivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = smollm3();
  m.heads = 8;
  m.groups = 4;  // a2a over tp x cp = 4
  m.seq = 32;
  EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("smollm3 context parallel");
}

// Per-layer sliding windows (model.window_attn_skip_freq; SmolLM3's windows on its NoPE layers):
// a 5-key window in layers 1 and 3 only, picked by global index on every stage and under cp.
TEST(SmolLM3Equivalence, PerLayerWindowsAcrossLayouts) {
  eq::RecipeSpec m = smollm3();
  m.model_extra += ", window_size: [4, 0], window_attn_skip_freq: [0, 1, 0, 1]";
  m.heads = 4;
  m.groups = 4;  // a2a over tp x cp = 4
  std::vector<eq::Layout> layouts = {
      {.pp = 2, .micro = 2}, {.pp = 2, .vpp = 2, .micro = 2}, {.tp = 2, .micro = 2, .sp = true},
      {.pp = 4, .micro = 4}, {.tp = 2, .pp = 2, .micro = 2},
  };
  for (const eq::Layout& l : eq::context_parallel_layouts()) layouts.push_back(l);
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("smollm3 per-layer windows");
}

}  // namespace
}  // namespace megatron
