// mpirun-np: 2 4
// Top-k gradient compression with error feedback over data parallelism
// (parallel.grad_compression: topk; optimizer/topk_compression.h): every rank's buckets hold the
// sum, in rank order, of every rank's top-k set, bit for bit as a naive reference recomputes it
// from all ranks' gradients, and each rank keeps exactly its own residual, over steps; the
// payload per step is the sets' (indices and values), not the buckets'. In training: ratio 1
// follows the uncompressed curve; a checkpoint resumes the compressed run bit for bit (the
// residuals saved per rank); every rank stays in step.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "equivalence_fixture.h"
#include "megatron/optimizer/grad_sync.h"
#include "megatron/optimizer/topk_compression.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;

float gradient(int rank, int step, int64_t i) {
  return std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(rank) +
                  0.7f * static_cast<float>(step)) *
         static_cast<float>(1 + (i * 7 + rank) % 5);
}

TEST(GradCompression, EveryRankSumsEveryRanksSetAndKeepsItsOwnResidual) {
  const int dp = world().size(), me = world().rank();
  const double ratio = 0.2;
  ParamStore store;
  for (int64_t n : {7, 13, 1, 30, 5}) store.add(concat("p", n), {n}, {}, true);
  DataParallelSharding sharding;
  sharding.dense_size = dp;
  sharding.dense_rank = me;
  sharding.bucket_elements = 16;
  store.finalize(DType::F32, sharding);
  optim::DataParallelGrads sync(store, BufferRegion::Dense, world());
  sync.compress_topk(ratio);
  const auto& buckets = sync.buckets();
  ASSERT_GE(buckets.size(), 3u);
  // The reference's residuals: every rank's, every bucket's.
  std::vector<std::vector<std::vector<float>>> residual(static_cast<size_t>(dp));
  for (auto& r : residual)
    for (const optim::BufferRange& b : buckets) r.emplace_back(static_cast<size_t>(b.size()), 0.f);
  float* g = store.grads().data<float>();
  for (int step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < store.buffer_numel(); ++i) g[i] = gradient(me, step, i);
    sync.begin_last_backward();
    sync.grads_ready_below(store.buffer_numel());
    sync.finish();
    int64_t bytes = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      const int64_t n = buckets[b].size(), k = optim::topk_keep(n, ratio);
      std::vector<float> want(static_cast<size_t>(n), 0.0f);
      const bool sparse = 2 * k < n;  // else the bucket goes whole, residual and all
      bytes += sparse ? 2 * k * 4 : n * 4;
      std::vector<int32_t> gathered(static_cast<size_t>(dp * 2 * k));
      for (int r = 0; r < dp; ++r) {
        std::vector<float> gr(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) gr[size_t(i)] = gradient(r, step, buckets[b].begin + i);
        auto& res = residual[size_t(r)][b];
        if (sparse) {
          optim::topk_compress(gr.data(), res.data(), n, k, gathered.data() + r * 2 * k);
        } else {
          for (int64_t i = 0; i < n; ++i) want[size_t(i)] += gr[size_t(i)] + res[size_t(i)];
          std::fill(res.begin(), res.end(), 0.0f);
        }
      }
      if (sparse) optim::topk_decompress(gathered.data(), dp, k, want.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        // The sparse sets add in rank order on every rank (exact); a whole bucket is the
        // all-reduce's sum (its order the library's).
        const float got = g[buckets[b].begin + i], w = want[size_t(i)];
        if (sparse) {
          ASSERT_EQ(got, w) << "step " << step << " bucket " << b;
        } else {
          ASSERT_NEAR(got, w, 1e-5f * (1 + std::fabs(w))) << "step " << step << " bucket " << b;
        }
      }
      const Tensor& mine = sync.residuals()[b];
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(mine.data<float>()[i], residual[size_t(me)][b][size_t(i)])
            << "residual, step " << step << " bucket " << b;
    }
    EXPECT_EQ(sync.take_bytes(), bytes) << "the sets' payload";
  }
}

eq::RecipeSpec model(double ratio, int64_t iters) {
  eq::RecipeSpec s{.arch = "llama", .layers = 2, .groups = 2, .ffn = 48};
  s.micro = 2;
  s.global = 8;
  s.iters = iters;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.decay_iters = 12;
  if (ratio > 0) s.parallel_extra = concat("grad_compression: topk, topk_ratio: ", ratio);
  return s;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 17, 3, 1});
}

TEST(GradCompression, RatioOneFollowsTheUncompressedCurveWithFewerBytesBelowIt) {
  const auto dense = eq::train_on_world(eq::make_recipe(model(0, 8)), tokens(), nullptr);
  const auto all = eq::train_on_world(eq::make_recipe(model(1.0, 8)), tokens(), nullptr);
  const auto sparse = eq::train_on_world(eq::make_recipe(model(0.05, 8)), tokens(), nullptr);
  ASSERT_EQ(all.steps.size(), dense.steps.size());
  for (size_t i = 0; i < dense.steps.size(); ++i) {
    // Every entry sent: the buckets go whole with a zero residual, the uncompressed run's bits.
    EXPECT_EQ(all.steps[i].loss, dense.steps[i].loss) << i;
    EXPECT_EQ(all.steps[i].dp_comm_bytes, dense.steps[i].dp_comm_bytes) << i;
    // 5% of the entries as (index, value) pairs: a tenth of the dense payload, or less.
    EXPECT_LT(sparse.steps[i].dp_comm_bytes * 9, dense.steps[i].dp_comm_bytes) << i;
    EXPECT_TRUE(std::isfinite(sparse.steps[i].loss));
  }
  EXPECT_LT(sparse.steps.back().loss, sparse.steps.front().loss) << "the compressed run learns";
}

// The warm-up: every entry at iteration 1 (whole buckets), the share falling geometrically to
// topk_ratio at iteration 1 + topk_warmup_iters, the payload with it.
TEST(GradCompression, WarmupGoesFromWholeBucketsToTheRatio) {
  eq::RecipeSpec s = model(0.01, 8);
  s.parallel_extra += ", topk_warmup_iters: 4";
  const auto dense = eq::train_on_world(eq::make_recipe(model(0, 8)), tokens(), nullptr);
  const auto warm = eq::train_on_world(eq::make_recipe(s), tokens(), nullptr);
  EXPECT_EQ(warm.steps[0].loss, dense.steps[0].loss);
  EXPECT_EQ(warm.steps[0].dp_comm_bytes, dense.steps[0].dp_comm_bytes);
  for (size_t i = 1; i < 5; ++i)
    EXPECT_LT(warm.steps[i].dp_comm_bytes, warm.steps[i - 1].dp_comm_bytes) << "step " << i + 1;
  for (size_t i = 5; i < 8; ++i)  // 1% as index/value pairs: 2% of the whole payload
    EXPECT_LT(warm.steps[i].dp_comm_bytes * 40, dense.steps[i].dp_comm_bytes) << "step " << i + 1;
}

// A checkpoint in the middle of a compressed run: resuming it gives the uninterrupted curve
// exactly (each rank's residuals saved and loaded); without them error feedback would restart.
TEST(GradCompression, ResumingTheCompressedRunIsBitExact) {
  // (with a warm-up: the share follows the iteration across the resume)
  eq::RecipeSpec run = model(0.05, 10);
  run.parallel_extra += ", topk_warmup_iters: 7";
  eq::expect_resume_is_bit_exact(
      run, 5, "megatron_topk_ckpt_", [](const eq::RecipeSpec& s) { return eq::make_recipe(s); },
      [](const config::Recipe& r) { return eq::train_on_world(r, tokens(), nullptr); });
}

}  // namespace
}  // namespace megatron
