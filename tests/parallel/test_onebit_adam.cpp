// mpirun-np: 2 3 4
// 1-bit Adam (optimizer.type: onebit_adam; optimizer/onebit_adam.h) across data-parallel ranks:
// the compressed all-reduce gives every rank the same bits, equal to a naive reference that
// simulates every rank's worker and server compression in one process (error buffers included),
// over rounds; the bytes it sends are the blocks' (about 1/32 of an all-reduce). The optimizer
// on a toy problem follows the algorithm written out naively (AdamW's warm-up, then the frozen
// variance and the exchanged momentum). In training: the warm-up is AdamW's run bit for bit, the
// compressed steps send >= 5x fewer bytes and learn, replicas stay identical in every supported
// layout, a checkpoint resumes the compressed run bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include "equivalence_fixture.h"
#include "megatron/optimizer/onebit_adam.h"
#include "megatron/optimizer/onebit_compression.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

namespace eq = megatron::equivalence;
namespace mp = megatron::parallel;
using mp::testing::world;
using optim::kOnebitBlock;

float value(int rank, int round, int64_t vec, int64_t i) {
  // Mostly small entries with a few large ones, different per rank, vector and round.
  const float base = std::sin(0.11f * static_cast<float>(i) + 0.9f * static_cast<float>(rank) +
                              0.5f * static_cast<float>(round) + static_cast<float>(vec));
  return (i % 37 == 0 ? 20.0f : 1.0f) * base * (rank % 2 ? 0.5f : 1.0f);
}

// The paper's compressed all-reduce written out over whole vectors: each block of each rank's
// (x + worker error) becomes scale * sign, the blocks averaged in rank order, then (+ server
// error) compressed again.
struct NaiveOnebit {
  int ranks;
  std::vector<int64_t> sizes;
  std::vector<std::vector<std::vector<float>>> worker;  // [rank][vector][padded]
  std::vector<std::vector<float>> server;               // [vector][padded] (chunks by owner)

  static int64_t padded(int64_t n, int w) {
    const int64_t unit = kOnebitBlock * w;
    return (n + unit - 1) / unit * unit;
  }
  // x + error -> scale * sign, error keeps the rest; one block.
  static void compress(std::vector<float>& x, float* error, int64_t at) {
    double squares = 0;
    for (int64_t i = 0; i < kOnebitBlock; ++i) {
      error[at + i] += x[size_t(at + i)];
      squares += double(error[at + i]) * error[at + i];
    }
    const auto scale = float(std::sqrt(squares / double(kOnebitBlock)));
    for (int64_t i = 0; i < kOnebitBlock; ++i) {
      const float s = error[at + i] >= 0.0f ? scale : -scale;
      x[size_t(at + i)] = s;
      error[at + i] -= s;
    }
  }
  void init() {
    worker.assign(size_t(ranks), {});
    for (auto& w : worker)
      for (int64_t n : sizes) w.emplace_back(size_t(padded(n, ranks)), 0.0f);
    for (int64_t n : sizes) server.emplace_back(size_t(padded(n, ranks)), 0.0f);
  }
  // xs[rank][vector] -> the average every rank gets, per vector.
  std::vector<std::vector<float>> run(const std::vector<std::vector<std::vector<float>>>& xs) {
    std::vector<std::vector<float>> out;
    for (size_t j = 0; j < sizes.size(); ++j) {
      const int64_t p = padded(sizes[j], ranks);
      std::vector<float> sum(size_t(p), 0.0f);
      for (int r = 0; r < ranks; ++r) {
        std::vector<float> x(size_t(p), 0.0f);
        std::copy(xs[size_t(r)][j].begin(), xs[size_t(r)][j].end(), x.begin());
        for (int64_t b = 0; b < p; b += kOnebitBlock) compress(x, worker[size_t(r)][j].data(), b);
        for (int64_t i = 0; i < p; ++i) sum[size_t(i)] += x[size_t(i)];
      }
      for (float& s : sum) s /= float(ranks);
      for (int64_t b = 0; b < p; b += kOnebitBlock) compress(sum, server[j].data(), b);
      sum.resize(size_t(sizes[j]));
      out.push_back(std::move(sum));
    }
    return out;
  }
};

TEST(OnebitAdam, CompressedAllReduceEqualsTheNaiveReferenceOnEveryRank) {
  const int w = world().size(), me = world().rank();
  // A vector shorter than a block, one of several blocks and a ragged end, one exact.
  const std::vector<int64_t> sizes{5, 3 * kOnebitBlock * w + 17, kOnebitBlock * w};
  optim::OnebitAllReduce reduce(world(), sizes);
  NaiveOnebit naive{w, sizes, {}, {}};
  naive.init();
  for (int round = 0; round < 4; ++round) {
    std::vector<std::vector<std::vector<float>>> all(static_cast<size_t>(w));
    for (int r = 0; r < w; ++r)
      for (size_t j = 0; j < sizes.size(); ++j) {
        all[size_t(r)].emplace_back(size_t(sizes[j]));
        for (int64_t i = 0; i < sizes[j]; ++i)
          all[size_t(r)][j][size_t(i)] = value(r, round, int64_t(j), i);
      }
    std::vector<std::vector<float>> mine = all[size_t(me)];
    std::vector<float*> xs;
    for (auto& v : mine) xs.push_back(v.data());
    reduce.average(xs);
    const auto want = naive.run(all);
    int64_t bits = 0;
    for (size_t j = 0; j < sizes.size(); ++j) {
      for (int64_t i = 0; i < sizes[j]; ++i)
        ASSERT_NEAR(mine[j][size_t(i)], want[j][size_t(i)],
                    1e-6f * (1.0f + std::fabs(want[j][size_t(i)])))
            << "round " << round << " vector " << j << " entry " << i;
      bits += NaiveOnebit::padded(sizes[j], w);
    }
    // Every rank holds the same bits.
    for (size_t j = 0; j < sizes.size(); ++j) {
      Tensor local = Tensor::wrap(mine[j].data(), {sizes[j]}, DType::F32);
      Tensor gathered = Tensor::empty({w * sizes[j]}, DType::F32);
      world().all_gather(local, gathered);
      for (int r = 1; r < w; ++r)
        ASSERT_EQ(std::memcmp(gathered.data<float>(), gathered.data<float>() + r * sizes[j],
                              size_t(sizes[j]) * sizeof(float)),
                  0)
            << "rank " << r << " differs from rank 0, vector " << j;
    }
    // Sent: every block's bits and scale to the all-to-all, this rank's chunk's to the gather.
    const int64_t blocks = bits / kOnebitBlock, block_bytes = 4 + kOnebitBlock / 8;
    EXPECT_EQ(reduce.take_bytes(), blocks * block_bytes + blocks / w * block_bytes);
  }
  // The worker error is this rank's own (the naive one's, entry for entry).
  const float* err = reduce.worker_error().data<float>();
  for (size_t j = 0, at = 0; j < sizes.size(); at += naive.worker[size_t(me)][j].size(), ++j)
    for (size_t i = 0; i < naive.worker[size_t(me)][j].size(); ++i)
      ASSERT_NEAR(err[at + i], naive.worker[size_t(me)][j][i],
                  1e-5f * (1.0f + std::fabs(naive.worker[size_t(me)][j][i])));
}

// The toy problem: rank r pulls x towards its own target t_r with curvature a (each rank's
// gradient is its share of the sum, as the trainer's are).
struct Toy {
  static constexpr double kLr = 0.05, kBeta1 = 0.9, kBeta2 = 0.99, kEps = 1e-8, kDecay = 0.01;
  static constexpr int64_t kFreeze = 4, kSteps = 14;
  std::vector<int64_t> sizes{300, 700};
  static float target(int r, int64_t j, int64_t i) {
    return std::cos(0.3f * float(i) + float(r) + 2.0f * float(j)) * (i % 5 == 0 ? 3.0f : 1.0f);
  }
  static float curvature(int64_t j, int64_t i) { return 0.5f + float((i * 7 + j) % 6) * 0.5f; }
  static float initial(int64_t j, int64_t i) { return 0.1f * std::sin(float(i + 13 * j)); }
  static void gradient(int r, int w, int64_t j, const float* x, int64_t n, float* g) {
    for (int64_t i = 0; i < n; ++i) g[i] = curvature(j, i) * (x[i] - target(r, j, i)) / float(w);
  }
};

TEST(OnebitAdam, ToyProblemFollowsTheAlgorithmWrittenOut) {
  const int w = world().size(), me = world().rank();
  Toy toy;
  ParamStore store;
  for (size_t j = 0; j < toy.sizes.size(); ++j)
    store.add(concat("x", j), {toy.sizes[j]}, {}, j == 0);
  store.finalize(DType::F32);
  const std::vector<ParamSegment>& segs = store.segments();
  auto weight = [&](size_t j) { return store.params()[j]->weight.data<float>(); };
  auto grad = [&](size_t j) { return store.params()[j]->grad.data<float>(); };
  // The naive run's state: x, m, v per vector; every rank's worker errors and the server's.
  std::vector<std::vector<float>> x, m, v;
  for (size_t j = 0; j < toy.sizes.size(); ++j) {
    x.emplace_back(size_t(toy.sizes[j]));
    for (int64_t i = 0; i < toy.sizes[j]; ++i)
      x[j][size_t(i)] = weight(j)[i] = Toy::initial(int64_t(j), i);
    m.emplace_back(size_t(toy.sizes[j]), 0.0f);
    v.emplace_back(size_t(toy.sizes[j]), 0.0f);
  }
  optim::Optimizer opt(store, {config::OptimizerType::OnebitAdam, Toy::kBeta1, Toy::kBeta2,
                               Toy::kEps, Toy::kDecay, Toy::kFreeze});
  optim::OnebitMomentumExchange exchange(store, world(), nullptr);
  opt.set_momentum_exchange(&exchange);
  NaiveOnebit naive{w, toy.sizes, {}, {}};
  naive.init();
  double start = 0, end = 0;
  for (int64_t step = 1; step <= Toy::kSteps; ++step) {
    const bool compressed = step > Toy::kFreeze;
    ASSERT_EQ(opt.compressing(), compressed) << "step " << step;
    for (size_t j = 0; j < toy.sizes.size(); ++j)
      Toy::gradient(me, w, int64_t(j), weight(j), toy.sizes[j], grad(j));
    if (!compressed) world().all_reduce(store.grads(), mp::ReduceOp::Sum);
    opt.step(Toy::kLr);
    // The algorithm, every rank simulated.
    const auto b1 = float(Toy::kBeta1), b2 = float(Toy::kBeta2), eps = float(Toy::kEps);
    const auto bc1 = float(1 - std::pow(Toy::kBeta1, step));
    const auto bc2 = float(1 - std::pow(Toy::kBeta2, compressed ? Toy::kFreeze : step));
    std::vector<std::vector<std::vector<float>>> u(static_cast<size_t>(w));
    for (size_t j = 0; j < toy.sizes.size(); ++j) {
      const int64_t n = toy.sizes[j];
      std::vector<std::vector<float>> g(static_cast<size_t>(w),
                                        std::vector<float>(static_cast<size_t>(n)));
      for (int r = 0; r < w; ++r)
        Toy::gradient(r, w, int64_t(j), x[j].data(), n, g[size_t(r)].data());
      for (int r = 0; r < w; ++r) u[size_t(r)].emplace_back(size_t(n));
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = size_t(i);
        if (!compressed) {
          float sum = 0;
          for (int r = 0; r < w; ++r) sum += g[size_t(r)][k];
          m[j][k] = b1 * m[j][k] + (1 - b1) * sum;
          v[j][k] = b2 * v[j][k] + (1 - b2) * sum * sum;
        }
        const float denom = std::sqrt(v[j][k] / bc2) + eps;
        for (int r = 0; r < w; ++r)
          u[size_t(r)][j][k] = (b1 * m[j][k] + (1 - b1) * float(w) * g[size_t(r)][k]) / denom;
      }
    }
    const auto averaged = compressed ? naive.run(u) : std::vector<std::vector<float>>{};
    for (size_t j = 0; j < toy.sizes.size(); ++j) {
      const float wd = j == 0 ? float(Toy::kDecay) : 0.0f;
      for (size_t k = 0; k < x[j].size(); ++k) {
        const float denom = std::sqrt(v[j][k] / bc2) + eps;
        // After the freeze the step is the exchanged average, clamped to AdamW's own bound.
        const float bound = optim::adam_step_bound(Toy::kBeta1, Toy::kBeta2);
        if (compressed) m[j][k] = averaged[j][k] * denom;
        const float step =
            compressed ? std::clamp(averaged[j][k] / bc1, -bound, bound) : m[j][k] / bc1 / denom;
        x[j][k] -= float(Toy::kLr) * (step + wd * x[j][k]);
        ASSERT_NEAR(weight(j)[k], x[j][k], 1e-4f * (1 + std::fabs(x[j][k])))
            << "step " << step << " vector " << j << " entry " << k;
      }
    }
    // The distance to the optimum (the targets' mean) falls.
    double d = 0;
    for (size_t j = 0; j < toy.sizes.size(); ++j)
      for (int64_t i = 0; i < toy.sizes[j]; ++i) {
        double t = 0;
        for (int r = 0; r < w; ++r) t += Toy::target(r, int64_t(j), i) / w;
        d += std::pow(weight(j)[i] - t, 2);
      }
    (step == 1 ? start : end) = d;
  }
  EXPECT_LT(end, 0.5 * start) << "the compressed steps learn";
  // Every rank holds the same weights (x0 decays, both moved by the exchanged momentum).
  Tensor all = Tensor::empty({w * store.weights().numel()}, DType::F32);
  world().all_gather(store.weights(), all);
  for (int r = 1; r < w; ++r)
    ASSERT_EQ(std::memcmp(all.data<float>(), all.data<float>() + r * store.weights().numel(),
                          store.weights().nbytes()),
              0)
        << "rank " << r;
  (void)segs;
}

eq::RecipeSpec model(int64_t iters) {
  eq::RecipeSpec s{.arch = "llama", .layers = 2, .groups = 2, .ffn = 48};
  s.micro = 1;
  s.global = 12;  // dp 2, 3 and 4
  s.iters = iters;
  s.eval_interval = 0;
  s.eval_iters = 0;
  s.decay_iters = 12;
  s.warmup = 2;
  s.clip_grad = 0;
  return s;
}

config::Recipe onebit(eq::RecipeSpec s, int64_t freeze) {
  config::Recipe r = eq::make_recipe(s);
  r.optimizer.type = config::OptimizerType::OnebitAdam;
  r.optimizer.freeze_step = freeze;
  r.validate();
  return r;
}

std::shared_ptr<eq::SyntheticTokens> tokens() {
  return std::make_shared<eq::SyntheticTokens>(eq::TokenRule{7919, 17, 3, 1});
}

// The data-parallel replicas' weights are identical after training (the compressed average is the
// same bits everywhere): all-gathered and compared, the dense region over dp and the experts'
// over expert dp (expert-parallel ranks hold other experts).
void expect_equal_over(const Tensor& mine, mp::Communicator& group, const std::string& what) {
  Tensor all = Tensor::empty({group.size() * mine.numel()}, mine.dtype());
  group.all_gather(mine, all);
  for (int r = 1; r < group.size(); ++r)
    EXPECT_EQ(std::memcmp(all.raw(), static_cast<const uint8_t*>(all.raw()) + r * mine.nbytes(),
                          mine.nbytes()),
              0)
        << what << ": rank " << r << " of " << group.name() << " differs from its rank 0";
}

void expect_replicas_equal(training::Trainer& t, const training::TrainerGroups& g,
                           const std::string& what) {
  ParamStore& store = t.store();
  const int64_t experts = store.expert_begin(), end = store.trainable_numel();
  expect_equal_over(store.weights().flat_view(0, {experts}), *g.dp, what + " (dense)");
  if (experts < end)
    expect_equal_over(store.weights().flat_view(experts, {end - experts}), *g.expert_dp,
                      what + " (experts)");
  // The tied embedding's copies on the first and last pipeline stages (exchanged over their own
  // stages' dp groups, each tensor compressed on its own) stay equal.
  if (g.pp->size() > 1 && g.embedding->size() > 1)
    for (Parameter* p : store.params())
      if (p->name == "embedding.word_embeddings.weight")
        expect_equal_over(p->weight, *g.embedding, what + " (tied embedding copies)");
}

training::TrainSummary train(const config::Recipe& r, bool check_replicas,
                             const std::string& what) {
  return eq::train_on_world(r, tokens(), nullptr,
                            [&](training::Trainer& t, const training::TrainerGroups& g) {
                              if (check_replicas) expect_replicas_equal(t, g, what);
                            });
}

TEST(OnebitAdam, WarmupIsAdamWThenTheMomentaGoAsSigns) {
  const int64_t freeze = 4, iters = 12;
  const auto adam = train(eq::make_recipe(model(iters)), false, "adamw");
  const auto one = train(onebit(model(iters), freeze), true, "onebit dp");
  ASSERT_EQ(one.steps.size(), adam.steps.size());
  // The loss of step k is measured before update k: steps 1..freeze+1 are AdamW's bit for bit.
  for (int64_t i = 0; i <= freeze; ++i) {
    EXPECT_EQ(one.steps[size_t(i)].loss, adam.steps[size_t(i)].loss) << "step " << i + 1;
    if (i < freeze) {
      EXPECT_EQ(one.steps[size_t(i)].dp_comm_bytes, adam.steps[size_t(i)].dp_comm_bytes) << i + 1;
    }
  }
  for (size_t i = size_t(freeze); i < adam.steps.size(); ++i) {
    if (world().size() > 1) {  // gradients stay local; momenta go as 1 bit + a scale per 256
      EXPECT_LT(one.steps[i].dp_comm_bytes * 5, adam.steps[i].dp_comm_bytes) << "step " << i + 1;
    }
    EXPECT_TRUE(std::isfinite(one.steps[i].loss)) << "step " << i + 1;
  }
  EXPECT_LT(one.steps.back().loss, one.steps[size_t(freeze)].loss) << "the compressed steps learn";
  EXPECT_LT(std::fabs(one.steps.back().loss - adam.steps.back().loss),
            0.1 * adam.steps.back().loss);
}

// Layouts 1-bit Adam supports: tp + sp, pp (the tied embedding's two copies exchanged on their
// stages' dp groups stay equal), MoE with experts over ep (expert momenta over expert dp), bf16.
TEST(OnebitAdam, EverySupportedLayoutKeepsItsReplicasEqual) {
  const int w = world().size();
  if (w < 4) GTEST_SKIP() << "layouts with dp 2 need 4 ranks";
  std::vector<std::pair<std::string, eq::RecipeSpec>> layouts;
  eq::RecipeSpec base = model(8);
  base.arch = "gpt";  // tied embeddings: a copy on the last stage
  {
    auto s = base;
    s.tp = 2;
    s.sp = true;
    layouts.emplace_back("tp2 sp", s);
  }
  {
    auto s = base;
    s.pp = 2;
    s.micro = 1;
    layouts.emplace_back("pp2", s);
  }
  {
    auto s = base;
    s.ep = 2;
    s.model_extra = "num_experts: 4, moe_router_topk: 2";
    layouts.emplace_back("ep2", s);
  }
  {
    auto s = base;
    s.precision = "bf16";
    layouts.emplace_back("bf16", s);
  }
  for (auto& [name, spec] : layouts) {
    const auto summary = train(onebit(spec, 3), true, name);
    ASSERT_EQ(summary.steps.size(), 8u) << name;
    for (const auto& st : summary.steps) EXPECT_TRUE(std::isfinite(st.loss)) << name;
    EXPECT_LT(summary.steps.back().loss, summary.steps.front().loss) << name << " learns";
  }
}

// A checkpoint after the freeze: resuming gives the uninterrupted curve exactly (the worker and
// server errors saved per rank and layout, the frozen variance with the moments).
TEST(OnebitAdam, ResumingTheCompressedRunIsBitExact) {
  eq::expect_resume_is_bit_exact(
      model(10), 5, "megatron_onebit_ckpt_", [](const eq::RecipeSpec& s) { return onebit(s, 3); },
      [](const config::Recipe& r) { return train(r, false, "resume"); });
}

}  // namespace
}  // namespace megatron
