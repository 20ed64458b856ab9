// mpirun-np: 2 4 8
// The LLaMA architecture (RMSNorm, SwiGLU, RoPE, grouped-query attention with 4 heads in 2
// groups, no biases, untied embedding and LM head; recipes/llama_tiny.yaml scaled down) trained
// by the Trainer under tensor (+ sequence), pipeline (1F1B and interleaved) and data parallelism
// (with and without the distributed optimizer), and their combinations (model_layouts()), gives
// the single-process loss and gradient-norm curve over 20 steps within fp32 round-off.
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

}  // namespace
}  // namespace megatron
