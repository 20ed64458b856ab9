// mpirun-np: 2 4
// LoRA fine-tuning (peft: lora on qkv, proj, fc1 and fc2; the base frozen) of the LLaMA-style
// model trained by the Trainer under tensor (+ sequence), pipeline (1F1B and interleaved) and
// data parallelism (with and without the distributed optimizer) gives the single-process loss
// and gradient-norm curve: the adapters are sharded like their base layers and their gradients
// reduced like any other weight's, while the frozen base holds no gradient.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

// The LLaMA-style model with rank-4 adapters (`peft`: the extra keys of the peft section).
eq::RecipeSpec lora_llama(int64_t iters, const std::string& peft = "") {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  llama.micro = 4;
  llama.seed = 17;
  llama.iters = iters;
  llama.lr = 0.02;
  llama.extra_sections = "peft: {type: lora, dim: 4, alpha: 8" + peft + "}\n";
  return llama;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5});
}

TEST(LoraEquivalence, EveryLayoutMatchesSingleProcess) {
  const eq::RecipeSpec llama = lora_llama(12);
  const auto src = tokens();
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("lora equivalence");
}

// Context parallelism: the adapters' dropout at the global positions of each rank's chunks.
TEST(LoraEquivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec llama = lora_llama(10, ", dropout: 0.2");
  llama.heads = 8;
  llama.groups = 4;  // a2a over tp x cp = 4
  llama.seq = 32;
  const auto src = std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, llama.seq);
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("lora context-parallel equivalence");
}

// Dropout on the adapters' inputs: the masks follow global indices (a row-parallel adapter's
// input shard at its global features), so every layout draws the single process's masks.
TEST(LoraEquivalence, DropoutMasksDoNotDependOnTheLayout) {
  const eq::RecipeSpec llama = lora_llama(10, ", dropout: 0.2");
  const auto src = tokens();
  EXPECT_GT(eq::expect_layouts_match(llama, src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("lora dropout equivalence");
}

// bf16 mixed precision: bf16 frozen base (no fp32 master for it), fp32 masters and Adam state for
// the adapters only.
TEST(LoraEquivalence, Bf16LayoutsTrackSingleProcess) {
  eq::RecipeSpec llama = lora_llama(8);
  llama.precision = "bf16";
  llama.lr = 0.005;  // see below
  const auto src = tokens();
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.pp = 2, .micro = 2},
      {.dp = 2, .micro = 2, .distributed = true},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true},
      {.tp = 2, .dp = 2, .micro = 2, .distributed = true},
  };
  // The bf16 tolerances of every equivalence test, at the fixture's learning rate. At the other
  // LoRA tests' 0.02 this run is unstable (the gradient norm jumps 2.5x at step 4) and grows the
  // tp layouts' bf16 rounding of row-parallel partial sums (6th digit of the first loss) into a
  // gradient-norm gap of up to 3-5% by step 7, depending on the CPU's rounding: that compared
  // the amplification, not the layouts. At 0.005 every layout stays within 0.05% (np 2 and 4,
  // MEGATRON_EQ_TRACE=1, AMD Zen 3) and the loss falls 3.616 -> 3.562.
  EXPECT_GT(eq::expect_layouts_match(llama, src, layouts, eq::Tolerance{2e-3, 3e-2}), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("lora bf16 equivalence");
}

}  // namespace
}  // namespace megatron
