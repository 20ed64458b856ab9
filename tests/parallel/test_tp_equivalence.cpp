// mpirun-np: 2 4 8
// Tensor parallelism, with and without sequence parallelism, and with data parallelism on the
// remaining ranks, reproduces the single-process loss curve over 20 steps within fp32
// round-off, for a GPT (learned positions, tied embeddings, dropout on), a LLaMA-style model
// (RMSNorm, SwiGLU, RoPE, GQA, untied) and a GPT with SwiGLU and biases (the stacked fc1's bias
// split over tp at the same rows as its weight).
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

eq::RecipeSpec gpt() {
  eq::RecipeSpec s;
  s.dropout = 0.1;
  s.seed = 9;
  return s;
}

eq::RecipeSpec llama() {
  eq::RecipeSpec s;
  s.arch = "llama";
  s.groups = 2;
  s.ffn = 48;
  s.seed = 9;
  return s;
}

eq::RecipeSpec swiglu_with_biases() {
  eq::RecipeSpec s = gpt();
  s.model_extra = "activation: swiglu, ffn_hidden_size: 48";
  return s;
}

TEST(TensorParallel, MatchesSingleProcess) {
  const int world_size = world().size();
  auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 3, 5, 2});
  for (const eq::RecipeSpec& model : {gpt(), llama(), swiglu_with_biases()}) {
    const auto reference = eq::train_single(eq::make_recipe(model), src, src);
    EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);
    const int64_t max_tp = model.arch == "gpt" && model.model_extra.empty() ? 4 : 2;
    for (int64_t tp = 2; tp <= std::min<int64_t>(max_tp, world_size); tp *= 2) {
      if (world_size % tp != 0) continue;
      const int64_t dp = world_size / tp;
      if (8 % dp != 0) continue;
      SCOPED_TRACE(model.arch + " tp=" + std::to_string(tp) + " dp=" + std::to_string(dp));
      const int64_t micro = 8 / dp >= 2 ? 2 : 1;
      for (bool sp : {false, true}) {
        SCOPED_TRACE(sp ? "sequence parallel" : "no sequence parallel");
        const eq::Layout layout{.tp = tp, .dp = dp, .micro = micro, .sp = sp};
        eq::expect_same_curve(
            eq::train_on_world(eq::make_recipe(layout.applied_to(model)), src, src), reference);
      }
    }
  }
  eq::report_max_diff("tp equivalence");
}

}  // namespace
}  // namespace megatron
