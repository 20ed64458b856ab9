// mpirun-np: 2 4 8
// The LLaMA architecture (RMSNorm, SwiGLU, RoPE, grouped-query attention with 4 heads in 2
// groups, no biases, untied embedding and LM head; recipes/llama_tiny.yaml scaled down) trained
// by the Trainer under tensor (+ sequence), pipeline (1F1B and interleaved) and data parallelism
// (with and without the distributed optimizer), and their combinations (model_layouts()), gives
// the single-process loss and gradient-norm curve over 20 steps within fp32 round-off; and in
// bf16 mixed precision (bf16 weights, activations and tensor-parallel reductions), within what
// bf16 rounding in a different reduction order leaves.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

TEST(LlamaEquivalence, EveryLayoutMatchesSingleProcess) {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  llama.micro = 4;  // the reference runs two micro-batches
  llama.seed = 13;
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("llama equivalence");
}

TEST(LlamaEquivalence, Bf16LayoutsTrackSingleProcess) {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  llama.micro = 4;
  llama.seed = 13;
  llama.iters = 10;
  llama.precision = "bf16";
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.pp = 2, .vpp = 2, .micro = 2},
      {.dp = 2, .micro = 2, .distributed = true},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true},
      {.tp = 2, .pp = 2, .dp = 2, .micro = 2, .sp = true, .distributed = true},
  };
  EXPECT_GT(eq::expect_layouts_match(llama, src, layouts, eq::Tolerance{2e-3, 3e-2}), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("llama bf16 equivalence");
}

}  // namespace
}  // namespace megatron
