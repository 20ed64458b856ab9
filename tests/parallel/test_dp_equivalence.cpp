// mpirun-np: 1 2 3 4
// Data parallelism reproduces the single-process run: for the same seed and global batch, every
// dp size (the world), micro-batch size and distributed-optimizer setting gives the loss curve
// of one process with one micro-batch of the whole batch, within fp32 round-off, over 20 steps
// (dropout on, so the layout-independent masks are exercised too).
#include <cmath>
#include <random>
#include <sstream>

#include "megatron/parallel/mesh.h"
#include "megatron/training/trainer.h"
#include "parallel_test.h"

namespace megatron {
namespace {

namespace mp = megatron::parallel;
using mp::testing::world;

// Random tokens with a learnable bigram structure: token t+1 = (3 * token t + noise) mod V.
class SyntheticSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 16; }
  int64_t samples_per_epoch() const override { return 1 << 20; }
  void get(int64_t index, int32_t* tokens) const override {
    std::mt19937 rng(static_cast<uint32_t>(index * 7919 + 17));
    tokens[0] = static_cast<int32_t>(rng() % 37);
    for (int64_t t = 1; t <= 16; ++t)
      tokens[t] =
          static_cast<int32_t>((3 * tokens[t - 1] + (rng() % 4 == 0 ? rng() % 37 : 1)) % 37);
  }
};

config::Recipe recipe(int64_t micro, bool distributed) {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
       " make_vocab_size_divisible_by: 8, hidden_dropout: 0.1, attention_dropout: 0.1}\n"
       "training: {micro_batch_size: "
    << micro
    << ", global_batch_size: 8, train_iters: 20, eval_interval: 10, eval_iters: 1, seed: 5,"
       " peak_tflops: 1.0}\n"
       "optimizer: {lr: 0.005, min_lr: 0.0005, weight_decay: 0.1, clip_grad: 0.5,"
       " distributed: "
    << (distributed ? "true" : "false")
    << ", schedule: {warmup_iters: 3}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 1000}\n";
  return config::parse_recipe_string(y.str(), "dp_equivalence.yaml");
}

training::TrainSummary train(const config::Recipe& r, training::TrainerGroups groups) {
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  training::Trainer t(r, 37, src, src, groups, log);
  return t.run();
}

TEST(DataParallel, MatchesSingleProcessForEveryLayout) {
  // Reference: one process, one micro-batch holding the whole global batch.
  auto self = mp::make_single_process_communicator();
  const auto reference = train(recipe(8, false), {self.get(), self.get(), self.get()});
  ASSERT_EQ(reference.steps.size(), 20u);
  EXPECT_LT(reference.steps.back().loss, reference.steps.front().loss);

  const int dp = world().size();
  if (8 % dp != 0) GTEST_SKIP() << "global batch 8 does not split over " << dp << " ranks";
  mp::MeshSizes sizes;
  sizes.dp = dp;
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  for (bool distributed : {false, true}) {
    for (int64_t micro : {1, 2, 4}) {
      if (8 % (micro * dp) != 0) continue;
      SCOPED_TRACE("dp=" + std::to_string(dp) + " micro=" + std::to_string(micro) +
                   (distributed ? " distributed" : ""));
      const auto got = train(recipe(micro, distributed), {&mesh.world(), &mesh.tp(), &mesh.dp()});
      ASSERT_EQ(got.steps.size(), reference.steps.size());
      for (size_t i = 0; i < got.steps.size(); ++i) {
        const double want = reference.steps[i].loss;
        EXPECT_NEAR(got.steps[i].loss, want, 2e-5 * want) << "step " << i + 1;
        EXPECT_NEAR(got.steps[i].grad_norm, reference.steps[i].grad_norm,
                    1e-4 * reference.steps[i].grad_norm + 1e-6)
            << "step " << i + 1;
      }
      ASSERT_EQ(got.evals.size(), reference.evals.size());
      for (size_t i = 0; i < got.evals.size(); ++i)
        EXPECT_NEAR(got.evals[i].loss, reference.evals[i].loss, 2e-5 * reference.evals[i].loss);
    }
  }
}

TEST(DataParallel, DistributedOptimizerStateShrinksWithDp) {
  const int dp = world().size();
  if (8 % dp != 0) GTEST_SKIP() << "global batch 8 does not split over " << dp << " ranks";
  mp::MeshSizes sizes;
  sizes.dp = dp;
  mp::Mesh mesh(sizes, world(), mp::testing::launch());
  auto src = std::make_shared<SyntheticSource>();
  std::ostringstream log;
  config::Recipe r = recipe(1, true);
  r.training.train_iters = 3;
  training::Trainer t(r, 37, src, nullptr, {&mesh.world(), &mesh.tp(), &mesh.dp()}, log);
  auto self = mp::make_single_process_communicator();
  training::Trainer full(recipe(8, false), 37, src, nullptr, {self.get(), self.get(), self.get()},
                         log);
  const double ratio = static_cast<double>(t.optimizer().state_bytes()) /
                       static_cast<double>(full.optimizer().state_bytes());
  EXPECT_NEAR(ratio, 1.0 / dp, 0.01 / dp) << "optimizer state bytes per rank";
}

TEST(GradSync, BucketsHoldTheSumOverDataParallel) {
  const int dp = world().size(), me = world().rank();
  for (bool distributed : {false, true}) {
    ParamStore store;
    for (int64_t n : {7, 13, 1, 30, 5}) store.add(concat("p", n), {n}, {}, true);
    store.finalize(distributed ? dp : 1);
    float* g = store.grads().data<float>();
    for (int64_t i = 0; i < store.numel(); ++i) g[i] = static_cast<float>((me + 1) * 1000 + i);
    optim::DataParallelGrads sync(store, world(), 8, distributed);
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
      float* v = store.values().data<float>();
      for (const optim::BufferRange& r : sync.owned())
        for (int64_t i = r.begin; i < r.end; ++i) v[i] = static_cast<float>(i);
      sync.gather_params();
      for (int64_t i = 0; i < store.buffer_numel(); ++i) ASSERT_EQ(v[i], static_cast<float>(i));
    }
  }
}

}  // namespace
}  // namespace megatron
