// mpirun-np: 2 4 8
// Pipeline parallelism (1F1B and interleaved), alone and combined with tensor (+ sequence)
// parallelism, data parallelism and the distributed optimizer, reproduces the single-process
// loss curve over 20 steps within fp32 round-off. Tied embeddings on the first and last stage
// exercise the embedding-group reduction; dropout exercises layout-independent masks.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

TEST(PipelineParallel, MatchesSingleProcess) {
  eq::RecipeSpec model;
  model.layers = 8;
  model.dropout = 0.1;
  model.seed = 21;
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{104729, 11, 7, 3});
  using L = eq::Layout;
  const std::vector<L> layouts = {{.pp = 2, .micro = 2},
                                  {.pp = 2, .vpp = 2, .micro = 2},
                                  {.pp = 4},
                                  {.pp = 4, .vpp = 2},
                                  {.tp = 2, .pp = 2, .micro = 2, .sp = true},
                                  {.pp = 2, .dp = 2, .micro = 2, .distributed = true},
                                  {.tp = 2, .pp = 2, .dp = 2, .sp = true, .distributed = true},
                                  {.tp = 2, .pp = 2, .dp = 2, .vpp = 2, .micro = 2},
                                  {.pp = 8},
                                  {.pp = 2, .micro = 2, .stage_layers = {3, 5}},
                                  {.pp = 4, .stage_layers = {1, 3, 3, 1}}};
  EXPECT_GT(eq::expect_layouts_match(model, src, layouts), 0)
      << "no layout for " << world().size() << " ranks";
  eq::report_max_diff("pp equivalence");
}

}  // namespace
}  // namespace megatron
