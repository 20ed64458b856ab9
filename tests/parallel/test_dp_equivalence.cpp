// mpirun-np: 1 2 3 4
// Data parallelism reproduces the single-process run: for the same seed and global batch, every
// dp size (the world), micro-batch size and distributed-optimizer setting gives the loss curve
// of one process with one micro-batch of the whole batch, within fp32 round-off, over 20 steps
// (dropout on, so the layout-independent masks are exercised too).
#include "equivalence_fixture.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

// Random tokens with a learnable bigram structure: token t+1 = (3 * token t + noise) mod V.
std::shared_ptr<eq::SyntheticTokens> source() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 17, 3, 1});
}

config::Recipe recipe(int64_t micro, bool distributed) {
  eq::RecipeSpec s;
  s.dropout = 0.1;
  s.seed = 5;
  s.micro = micro;
  s.distributed = distributed;
  return eq::make_recipe(s, "dp_equivalence.yaml");
}

TEST(DataParallel, MatchesSingleProcessForEveryLayout) {
  // Reference: one process, one micro-batch holding the whole global batch.
  auto src = source();
  const auto reference = eq::train_single(recipe(8, false), src, src);
  ASSERT_EQ(reference.steps.size(), 20u);
  EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);

  const int dp = world().size();
  if (8 % dp != 0) GTEST_SKIP() << "global batch 8 does not split over " << dp << " ranks";
  for (bool distributed : {false, true}) {
    for (int64_t micro : {1, 2, 4}) {
      if (8 % (micro * dp) != 0) continue;
      SCOPED_TRACE("dp=" + std::to_string(dp) + " micro=" + std::to_string(micro) +
                   (distributed ? " distributed" : ""));
      eq::expect_same_curve(eq::train_on_world(recipe(micro, distributed), src, src), reference,
                            {.loss = 2e-5, .grad_norm = 1e-4});
    }
  }
  eq::report_max_diff("dp equivalence");
}

TEST(DataParallel, DistributedOptimizerStateShrinksWithDp) {
  const int dp = world().size();
  if (8 % dp != 0) GTEST_SKIP() << "global batch 8 does not split over " << dp << " ranks";
  mp::MeshSizes sizes;
  sizes.dp = dp;
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  auto src = source();
  std::ostringstream log;
  config::Recipe r = recipe(1, true);
  r.training.train_iters = 3;
  training::Trainer t(r, eq::kVocab, src, nullptr, {&mesh.world(), &mesh.tp(), &mesh.dp()}, log);
  auto self = mp::make_single_process_communicator();
  training::Trainer full(recipe(8, false), eq::kVocab, src, nullptr,
                         {self.get(), self.get(), self.get()}, log);
  const double ratio = static_cast<double>(t.optimizer().state_bytes()) /
                       static_cast<double>(full.optimizer().state_bytes());
  EXPECT_NEAR(ratio, 1.0 / dp, 0.01 / dp) << "optimizer state bytes per rank";
}

TEST(GradSync, BucketsHoldTheSumOverDataParallel) {
  const int dp = world().size(), me = world().rank();
  for (bool distributed : {false, true}) {
    ParamStore store;
    for (int64_t n : {7, 13, 1, 30, 5}) store.add(concat("p", n), {n}, {}, true);
    DataParallelSharding sharding;
    sharding.optimizer = distributed;
    sharding.dense_size = dp;
    sharding.dense_rank = me;
    sharding.bucket_elements = 8;
    store.finalize(DType::F32, sharding);
    float* g = store.grads().data<float>();
    for (int64_t i = 0; i < store.numel(); ++i) g[i] = static_cast<float>((me + 1) * 1000 + i);
    optim::DataParallelGrads sync(store, BufferRegion::Dense, world());
    EXPECT_GE(sync.buckets().size(), 6u);
    sync.begin_last_backward();
    for (int64_t w = 0; w <= store.buffer_numel(); w += 11) sync.grads_ready_below(w);
    sync.grads_ready_below(store.buffer_numel());
    sync.finish();
    const double rank_sum = dp * (dp + 1) / 2.0;
    for (const optim::BufferRange& r : sync.owned())
      for (int64_t i = r.begin; i < std::min(r.end, store.numel()); ++i)
        ASSERT_EQ(g[i], static_cast<float>(rank_sum * 1000 + dp * i))
            << "element " << i << (distributed ? " distributed" : "");
    if (distributed) {
      // After the step each rank's shards are gathered back into every rank's parameters.
      float* v = store.weights().data<float>();
      for (const optim::BufferRange& r : sync.owned())
        for (int64_t i = r.begin; i < r.end; ++i) v[i] = static_cast<float>(i);
      sync.gather_params();
      for (int64_t i = 0; i < store.buffer_numel(); ++i) ASSERT_EQ(v[i], static_cast<float>(i));
    }
  }
}

}  // namespace
}  // namespace megatron
