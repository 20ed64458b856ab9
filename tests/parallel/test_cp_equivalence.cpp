// mpirun-np: 2 4
// Context parallelism (parallel.context, cp_comm_type p2p / all_gather / a2a) trained by the
// Trainer gives the single-process loss and gradient-norm curve over 20 steps within fp32
// round-off: alone at cp 2 and 4, with full recompute, and combined with tensor + sequence,
// pipeline (1F1B and interleaved) and data parallelism under the distributed optimizer and
// ZeRO-3 (context_parallel_layouts()), and hybrid sharding (two optimizer instances); for GPT with
// attention and hidden dropout (masks at global positions), for LLaMA with grouped-query attention
// and a sliding window, in bf16, and with a context-parallel rank whose every label is masked (zero
// targets there: the loss is still the whole batch's and nothing turns NaN).
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;

std::shared_ptr<eq::SyntheticTokens> tokens(int64_t seq) {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{6151, 7, 11, 5}, seq);
}

TEST(CpEquivalence, GptWithDropoutMatchesSingleProcess) {
  eq::RecipeSpec gpt{.arch = "gpt", .layers = 4};
  gpt.seq = 32;
  gpt.dropout = 0.1;
  gpt.micro = 4;
  gpt.seed = 3;
  EXPECT_GT(eq::expect_layouts_match(gpt, tokens(gpt.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("gpt context-parallel equivalence");
}

TEST(CpEquivalence, LlamaGqaSlidingWindowMatchesSingleProcess) {
  // 8 heads in 4 groups: a2a splits the groups over tp x cp = 4 ranks.
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .heads = 8, .groups = 4, .ffn = 48};
  llama.seq = 32;
  llama.model_extra = "window_size: [6, 0]";  // 7 keys: most blocks of a chunk pair skipped
  llama.micro = 4;
  llama.seed = 13;
  EXPECT_GT(eq::expect_layouts_match(llama, tokens(llama.seq), eq::context_parallel_layouts()), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("llama sliding-window context-parallel equivalence");
}

// Hybrid sharding (parallel.num_distributed_optimizer_instances) with cp: the shards span one
// instance's dp x cp ranks (the mesh's dp_shard_cp), the replicas the same shard and cp rank in
// the other instance; each strategy, each cp_comm_type.
TEST(CpEquivalence, HybridShardingMatchesSingleProcess) {
  if (mp::testing::world().size() != 4) GTEST_SKIP() << "dp 2 in 2 instances x cp 2: 4 ranks";
  eq::RecipeSpec gpt{.arch = "gpt", .layers = 4};
  gpt.seq = 32;
  gpt.micro = 4;
  gpt.seed = 5;
  const std::vector<eq::Layout> layouts = {
      {.dp = 2, .micro = 2, .sharding = "optim", .dp_instances = 2, .cp = 2, .cp_comm = "p2p"},
      {.dp = 2,
       .micro = 2,
       .sharding = "optim_grads",
       .dp_instances = 2,
       .cp = 2,
       .cp_comm = "all_gather"},
      {.dp = 2,
       .micro = 1,
       .sharding = "optim_grads_params",
       .dp_instances = 2,
       .cp = 2,
       .cp_comm = "a2a"},
      {.dp = 2,
       .micro = 2,
       .sharding = "optim_grads_params",
       .dp_instances = 2,
       .cp = 2,
       .cp_comm = "p2p"},
  };
  EXPECT_GT(eq::expect_layouts_match(gpt, tokens(gpt.seq), layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("gpt hybrid sharding with cp");
}

TEST(CpEquivalence, Bf16TracksSingleProcess) {
  eq::RecipeSpec llama{.arch = "llama", .layers = 4, .groups = 2, .ffn = 48};
  llama.seq = 32;
  llama.micro = 4;
  llama.seed = 13;
  llama.iters = 10;
  llama.precision = "bf16";
  const std::vector<eq::Layout> layouts = {
      {.micro = 2, .cp = 2, .cp_comm = "p2p"},
      {.micro = 2, .cp = 2, .cp_comm = "a2a"},
      {.tp = 2, .micro = 2, .sp = true, .cp = 2, .cp_comm = "all_gather"},
  };
  EXPECT_GT(eq::expect_layouts_match(llama, tokens(llama.seq), layouts, eq::Tolerance{2e-3, 3e-2}),
            0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("llama bf16 context-parallel equivalence");
}

// Token windows whose labels are masked in the middle half of every sequence: at cp 2 that is
// all of rank 1's positions (chunks 1 and 2 of 4), which then has no target at all.
class MiddleMaskedTokens final : public training::BatchSource {
 public:
  explicit MiddleMaskedTokens(int64_t seq) : inner_(eq::TokenRule{}, seq), seq_(seq) {}
  int64_t seq_length() const override { return seq_; }
  int64_t samples_per_epoch() const override { return inner_.samples_per_epoch(); }
  void fill(int64_t first, int64_t mbs, models::MicroBatch& mb) const override {
    inner_.fill(first, mbs, mb);
    int32_t* labels = mb.labels.data<int32_t>();
    for (int64_t s = seq_ / 4; s < 3 * seq_ / 4; ++s)
      for (int64_t b = 0; b < mbs; ++b) labels[s * mbs + b] = models::kIgnoreIndex;
  }

 private:
  eq::SyntheticTokens inner_;
  int64_t seq_;
};

TEST(CpEquivalence, ARankWithoutTargetsKeepsTheWholeBatchLoss) {
  if (mp::testing::world().size() != 2) GTEST_SKIP() << "a cp 2 layout: 2 ranks";
  eq::RecipeSpec llama{.arch = "llama", .layers = 2, .groups = 2, .ffn = 48};
  llama.seq = 32;
  llama.micro = 4;
  llama.iters = 8;
  const std::vector<eq::Layout> layouts = {{.micro = 2, .cp = 2, .cp_comm = "p2p"},
                                           {.micro = 2, .cp = 2, .cp_comm = "a2a"}};
  const auto src = std::make_shared<MiddleMaskedTokens>(llama.seq);
  EXPECT_GT(eq::expect_layouts_match(llama, src, layouts), 0)
      << "no layout for " << mp::testing::world().size() << " ranks";
  eq::report_max_diff("masked-rank context-parallel equivalence");
}

}  // namespace
}  // namespace megatron
