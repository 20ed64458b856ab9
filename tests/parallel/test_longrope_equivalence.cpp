// mpirun-np: 2 4
// A Phi-3-like tiny model: LongRoPE (per-pair frequency factors, the long ones because the
// 16-token sequence passes the 8 original positions; cos and sin scaled by the attention factor)
// and a 5-key sliding window. Every layout, context parallelism included (each rank holds two
// chunks of the sequence, yet all pick the factors by the whole sequence's length), gives the
// single-process loss and gradient-norm curve; and so do dynamic NTK scaling under cp and partial
// rotary embeddings (model.rotary_percent, Phi-4-mini's kind) with LongRoPE over their pairs.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec phi3_like(int64_t heads = 4, int64_t groups = 2) {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .heads = heads, .groups = groups, .ffn = 48};
  m.model_extra =
      heads == 4 ? "longrope_short_factor: [1.0, 1.1, 1.3, 1.7], "
                   "longrope_long_factor: [1.5, 2.0, 3.0, 5.0], "
                   "longrope_original_max_position_embeddings: 8, max_position_embeddings: 64, "
                   "window_size: [4, 0]"
                 : "longrope_short_factor: [1.0, 1.2], longrope_long_factor: [2.0, 4.0], "
                   "longrope_original_max_position_embeddings: 20, max_position_embeddings: 64, "
                   "window_size: [4, 0]";
  m.micro = 4;
  m.iters = 10;
  m.seed = 29;
  m.lr = 0.01;
  return m;
}

TEST(LongRopeEquivalence, ModelLayoutsMatchSingleProcess) {
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(phi3_like(), src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("longrope layouts");
}

TEST(LongRopeEquivalence, ContextParallelLayoutsMatchSingleProcess) {
  // head_dim 4; a2a over tp x cp = 4. 20 original positions: the 32-token sequence picks the
  // long factors, though no rank holds more than 16 of its rows.
  eq::RecipeSpec m = phi3_like(8, 4);
  m.seq = 32;
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, m.seq);
  EXPECT_GT(eq::expect_layouts_match(m, src, eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("longrope context parallel");
}

// Dynamic NTK scaling past 20 positions: the 32-token sequence's base, on every cp rank.
TEST(LongRopeEquivalence, DynamicNtkContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m{.arch = "llama", .layers = 4, .heads = 8, .groups = 4, .ffn = 48, .seq = 32};
  m.model_extra = "rope_dynamic_factor: 2, max_position_embeddings: 20";
  m.micro = 4;
  m.iters = 10;
  m.seed = 31;
  m.lr = 0.01;
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, m.seq);
  EXPECT_GT(eq::expect_layouts_match(m, src, eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("dynamic ntk context parallel");
}

// Half of each 8-dim head turns (4 dims, 2 LongRoPE pairs); tp splits heads, cp the sequence
// (4 key/value heads: a2a over tp x cp = 4).
TEST(LongRopeEquivalence, PartialRotaryLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = phi3_like(4, 4);
  m.model_extra =
      "rotary_percent: 0.5, longrope_short_factor: [1.0, 1.4], longrope_long_factor: [2.0, 3.0], "
      "longrope_original_max_position_embeddings: 8, max_position_embeddings: 64";
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  std::vector<eq::Layout> layouts = eq::model_layouts();
  for (const eq::Layout& l : eq::context_parallel_layouts()) layouts.push_back(l);
  EXPECT_GT(eq::expect_layouts_match(m, src, layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("partial rotary layouts");
}

}  // namespace
}  // namespace megatron
