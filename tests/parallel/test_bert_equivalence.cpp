// mpirun-np: 2 4 8
// BERT (post-LN encoder, padding-masked bidirectional attention, masked-LM head tied to the
// embeddings, sentence-pair head; dropout on; recipes/bert_tiny.yaml scaled down) trained by the
// Trainer on padded two-segment batches under tensor (+ sequence), pipeline (1F1B and
// interleaved) and data parallelism (with and without the distributed optimizer), and their
// combinations (model_layouts()), gives the single-process curve over 20 steps within fp32
// round-off: the total loss, its masked-LM and sentence-pair parts separately, the gradient
// norm and the validation losses; and in bf16 mixed precision on a few layouts, within what bf16
// rounding in another reduction order leaves.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec bert() {
  eq::RecipeSpec s{.arch = "bert", .layers = 4, .dropout = 0.1};
  s.micro = 4;  // the reference runs two micro-batches
  s.seed = 17;
  return s;
}

TEST(BertEquivalence, EveryLayoutMatchesSingleProcess) {
  auto src = std::make_shared<eq::SyntheticBert>();
  EXPECT_GT(eq::expect_layouts_match(bert(), src, eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("bert equivalence");
}

// Without the binary head (data.bert_binary_head: false: no pooler, no sentence-pair loss), on
// one pipeline-parallel layout per rank count.
TEST(BertEquivalence, WithoutBinaryHeadMatchesSingleProcess) {
  eq::RecipeSpec s = bert();
  s.binary_head = false;
  s.iters = 10;
  s.eval_interval = 5;
  auto src = std::make_shared<eq::SyntheticBert>(16, false);
  const std::vector<eq::Layout> layouts = {{.pp = 2, .micro = 2},
                                           {.tp = 2, .pp = 2, .micro = 2, .sp = true},
                                           {.tp = 2, .pp = 2, .dp = 2, .vpp = 2, .micro = 1}};
  EXPECT_GT(eq::expect_layouts_match(s, src, layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("bert (no binary head) equivalence");
}

// bf16 weights, activations and tensor-parallel reductions (the [CLS] broadcast and the
// vocab-parallel MLM loss included), with dropout.
TEST(BertEquivalence, Bf16LayoutsTrackSingleProcess) {
  eq::RecipeSpec s = bert();
  s.precision = "bf16";
  auto src = std::make_shared<eq::SyntheticBert>();
  const std::vector<eq::Layout> layouts = {{.tp = 2, .micro = 2, .sp = true},
                                           {.pp = 2, .vpp = 2, .micro = 2},
                                           {.tp = 2, .pp = 2, .micro = 2, .sp = true},
                                           {.tp = 2, .pp = 2, .dp = 2, .micro = 2, .sp = true}};
  EXPECT_GT(eq::expect_layouts_match(s, src, layouts, eq::Tolerance{2e-3, 3e-2}), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("bert bf16 equivalence");
}

}  // namespace
}  // namespace megatron
