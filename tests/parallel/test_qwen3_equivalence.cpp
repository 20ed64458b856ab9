// mpirun-np: 2 4
// A Qwen3-like tiny model: per-head q/k RMSNorm before rope (model.qk_layernorm) with a head
// dimension apart from hidden / heads (kv_channels 12, not 32 / 4). Its norm weights are
// replicated over tensor parallelism while each rank normalizes only its own heads, so their
// gradients are summed over tp; every layout (tp with and without sequence parallelism, pp 1F1B
// and interleaved, dp under each sharding strategy, recompute, context parallelism, LoRA, bf16)
// must give the single-process loss and gradient-norm curve.
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

eq::RecipeSpec qwen3(int64_t layers = 4) {
  eq::RecipeSpec m{.arch = "llama", .layers = layers, .groups = 2, .ffn = 48};
  m.model_extra = "kv_channels: 12, qk_layernorm: true, layernorm_epsilon: 1.0e-6";
  m.micro = 4;
  m.iters = 10;
  m.seed = 23;
  m.lr = 0.01;
  return m;
}

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq = 16) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(Qwen3Equivalence, ModelLayoutsMatchSingleProcess) {
  EXPECT_GT(eq::expect_layouts_match(qwen3(), tokens(), eq::model_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("qwen3 layouts");
}

TEST(Qwen3Equivalence, ShardingAndRecomputeMatchSingleProcess) {
  const std::vector<eq::Layout> layouts = {
      {.dp = 2, .micro = 2, .sharding = "optim_grads"},
      {.dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.tp = 2, .micro = 2, .sp = true, .recompute = "selective"},
      {.pp = 2, .micro = 2, .recompute = "full"},
      {.tp = 2, .dp = 2, .micro = 2, .sharding = "optim_grads_params"},
      {.dp = 4, .micro = 1, .sharding = "optim_grads", .dp_instances = 2},
  };
  EXPECT_GT(eq::expect_layouts_match(qwen3(), tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("qwen3 sharding / recompute");
}

TEST(Qwen3Equivalence, ContextParallelLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = qwen3(4);
  m.heads = 8;
  m.groups = 4;  // a2a over tp x cp = 4
  m.seq = 32;
  EXPECT_GT(eq::expect_layouts_match(m, tokens(m.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("qwen3 context parallel");
}

// LoRA: the q/k norms are frozen with the rest of the base (their gradients dropped).
TEST(Qwen3Equivalence, LoraLayoutsMatchSingleProcess) {
  eq::RecipeSpec m = qwen3();
  m.lr = 0.02;
  m.extra_sections = "peft: {type: lora, dim: 4, alpha: 8}\n";
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.pp = 2, .vpp = 2, .micro = 2},
      {.tp = 2, .dp = 2, .micro = 2, .distributed = true},
  };
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("qwen3 lora");
}

// bf16 mixed precision, within the bf16 tolerances of the other equivalence tests.
TEST(Qwen3Equivalence, Bf16LayoutsTrackSingleProcess) {
  eq::RecipeSpec m = qwen3();
  m.precision = "bf16";
  m.lr = 0.005;
  const std::vector<eq::Layout> layouts = {
      {.tp = 2, .micro = 2, .sp = true},
      {.dp = 2, .micro = 2, .distributed = true},
      {.tp = 2, .pp = 2, .micro = 2, .sp = true},
  };
  EXPECT_GT(eq::expect_layouts_match(m, tokens(), layouts, eq::Tolerance{2e-3, 3e-2}), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("qwen3 bf16");
}

}  // namespace
}  // namespace megatron
