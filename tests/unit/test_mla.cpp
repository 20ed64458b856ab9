// Multi-latent attention (megatron/transformer/mla.h): parameter shapes; the forward against a
// naive double-precision reference of the definition (queries through the low-rank path or one
// projection, the latent and its shared rope key, rope on the first Dr dims of q and k, values
// narrower than the query/key heads) on the unfused and flash paths; finite-difference gradients
// of the input and every parameter; KV-cached decoding against the full forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/parallel/communicator.h"
#include "megatron/transformer/kv_cache.h"
#include "megatron/transformer/mla.h"
#include "tests/support/random_tensor.h"

namespace megatron {
namespace {

// Rq 12, Rkv 8, Dn 4, Dr 4, Dv 6: the packing moves rows of width 2 and pads values by 2.
constexpr int64_t kHidden = 16, kHeads = 4, kRq = 12, kRkv = 8, kDn = 4, kDr = 4, kDv = 6;
constexpr int64_t kDqk = kDn + kDr, kSeq = 5, kBatch = 2;

TransformerSpec spec(bool flash, bool q_lora) {
  TransformerSpec t;
  t.num_layers = 1;
  t.hidden = kHidden;
  t.heads = kHeads;
  t.query_groups = kHeads;
  t.kv_channels = kDqk;
  t.ffn = 24;
  t.seq_length = kSeq;
  t.norm = Norm::Kind::RMSNorm;
  t.rope = true;
  t.rope_theta = 100.0f;  // turns fast enough over 5 positions to matter
  t.rope_rotary_dims = kDr;
  t.bias = false;
  t.init_std = 0.3f;
  t.flash_attention = flash;
  t.mla = {q_lora ? kRq : 0, kRkv, kDn, kDr, kDv};
  return t;
}

using megatron::testing::random_tensor;

struct Layer {
  Layer(bool flash, bool q_lora)
      : tspec(spec(flash, q_lora)), tp(parallel::make_single_process_communicator()) {
    const std::string prefix = "layers.0";
    attention =
        std::make_unique<MultiLatentAttention>(SubmoduleArgs{store, prefix, 0, tspec, *tp, {}});
    store.finalize();
    store.initialize(7);
    // Norm weights away from 1, so that a skipped or misplaced norm shows.
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(1.0f, 0.3f);
    for (Parameter* p : store.params())
      if (p->name.find("norm") != std::string::npos)
        for (int64_t i = 0; i < p->weight.numel(); ++i) p->weight.data<float>()[i] = dist(rng);
  }
  const float* w(const std::string& name) {
    return store.get("layers.0.attention." + name + ".weight").weight.data<float>();
  }
  bool has(const std::string& name) {
    for (Parameter* p : store.params())
      if (p->name == "layers.0.attention." + name + ".weight") return true;
    return false;
  }

  TransformerSpec tspec;
  std::unique_ptr<parallel::Communicator> tp;
  ParamStore store;
  std::unique_ptr<MultiLatentAttention> attention;
};

std::vector<double> matvec(const float* w, const std::vector<double>& x, int64_t out) {
  std::vector<double> y(static_cast<size_t>(out), 0.0);
  const int64_t in = static_cast<int64_t>(x.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[size_t(o)] += double(w[o * in + i]) * x[size_t(i)];
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const float* w, double eps) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double r = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w[i];
  return y;
}

// Rotate-half rope over the first kDr dims of v (pairs i, i + kDr / 2) at position t.
void rope(double* v, int64_t t, double theta) {
  math::RopeFrequencies f(static_cast<float>(theta));
  f.rotary_dims = kDr;
  for (int64_t i = 0; i < kDr / 2; ++i) {
    const double angle = double(t) * double(math::rope_inv_freq(i, kDr, f));
    const double a = v[i], c = v[i + kDr / 2];
    v[i] = a * std::cos(angle) - c * std::sin(angle);
    v[i + kDr / 2] = c * std::cos(angle) + a * std::sin(angle);
  }
}

// Per token: q [H, Dqk] (rope part first), k [H, Dqk], v [H, Dv].
struct Qkv {
  std::vector<double> q, k, v;
};

Qkv naive_qkv(Layer& l, const Tensor& x, int64_t t, int64_t b) {
  const double eps = l.tspec.norm_eps;
  std::vector<double> xi(x.data<float>() + (t * kBatch + b) * kHidden,
                         x.data<float>() + (t * kBatch + b + 1) * kHidden);
  Qkv o;
  o.q = l.has("q_down") ? matvec(l.w("q_up"),
                                 rmsnorm(matvec(l.w("q_down"), xi, kRq), l.w("q_down_norm"), eps),
                                 kHeads * kDqk)
                        : matvec(l.w("q"), xi, kHeads * kDqk);
  const std::vector<double> latent = matvec(l.w("kv_down"), xi, kRkv + kDr);
  const std::vector<double> c(latent.begin(), latent.begin() + kRkv);
  const std::vector<double> kv = matvec(l.w("kv_up"), rmsnorm(c, l.w("kv_down_norm"), eps),
                                        kHeads * (kDn + kDv));
  for (int64_t h = 0; h < kHeads; ++h) {
    rope(&o.q[size_t(h * kDqk)], t, l.tspec.rope_theta);
    std::vector<double> k(latent.begin() + kRkv, latent.end());  // the shared rope key
    rope(k.data(), t, l.tspec.rope_theta);
    const double* kvh = &kv[size_t(h * (kDn + kDv))];
    k.insert(k.end(), kvh, kvh + kDn);
    o.k.insert(o.k.end(), k.begin(), k.end());
    o.v.insert(o.v.end(), kvh + kDn, kvh + kDn + kDv);
  }
  return o;
}

std::vector<double> naive_mla(Layer& l, const Tensor& x) {
  std::vector<std::vector<Qkv>> all(kSeq);
  for (int64_t t = 0; t < kSeq; ++t)
    for (int64_t b = 0; b < kBatch; ++b) all[size_t(t)].push_back(naive_qkv(l, x, t, b));
  const double scale = 1.0 / std::sqrt(double(kDqk));
  std::vector<double> out;
  for (int64_t t = 0; t < kSeq; ++t)
    for (int64_t b = 0; b < kBatch; ++b) {
      std::vector<double> o(size_t(kHeads * kDv), 0.0);
      for (int64_t h = 0; h < kHeads; ++h) {
        std::vector<double> p;
        double top = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < kDqk; ++d)
            dot += all[size_t(t)][size_t(b)].q[size_t(h * kDqk + d)] *
                   all[size_t(j)][size_t(b)].k[size_t(h * kDqk + d)];
          p.push_back(dot * scale);
          top = std::max(top, p.back());
        }
        for (double& v : p) sum += (v = std::exp(v - top));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < kDv; ++d)
            o[size_t(h * kDv + d)] +=
                p[size_t(j)] / sum * all[size_t(j)][size_t(b)].v[size_t(h * kDv + d)];
      }
      const std::vector<double> y = matvec(l.w("proj"), o, kHidden);
      out.insert(out.end(), y.begin(), y.end());
    }
  return out;
}

TEST(MultiLatentAttention, ParametersHaveTheLatentShapes) {
  Layer l(false, true);
  auto shape = [&](const std::string& n) {
    return l.store.get("layers.0.attention." + n + ".weight").weight.shape();
  };
  EXPECT_EQ(shape("q_down"), (Shape{kRq, kHidden}));
  EXPECT_EQ(shape("q_down_norm"), (Shape{kRq}));
  EXPECT_EQ(shape("q_up"), (Shape{kHeads * kDqk, kRq}));
  EXPECT_EQ(shape("kv_down"), (Shape{kRkv + kDr, kHidden}));
  EXPECT_EQ(shape("kv_down_norm"), (Shape{kRkv}));
  EXPECT_EQ(shape("kv_up"), (Shape{kHeads * (kDn + kDv), kRkv}));
  EXPECT_EQ(shape("proj"), (Shape{kHidden, kHeads * kDv}));
  Layer plain(false, false);
  EXPECT_EQ(plain.store.get("layers.0.attention.q.weight").weight.shape(),
            (Shape{kHeads * kDqk, kHidden}));
  EXPECT_FALSE(plain.has("q_down"));
}

TEST(MultiLatentAttention, ForwardMatchesNaiveReference) {
  for (bool q_lora : {true, false})
    for (bool flash : {false, true}) {
      SCOPED_TRACE(std::string(flash ? "flash" : "unfused") + (q_lora ? " q_lora" : ""));
      Layer l(flash, q_lora);
      const Tensor x = random_tensor({kSeq, kBatch, kHidden}, 11);
      auto state = l.attention->make_state();
      const Tensor& y = l.attention->forward(*state, x, MicroBatchInfo{}, nullptr);
      ASSERT_EQ(y.shape(), (Shape{kSeq, kBatch, kHidden}));
      const std::vector<double> want = naive_mla(l, x);
      for (int64_t i = 0; i < y.numel(); ++i)
        EXPECT_NEAR(y.data<float>()[i], want[size_t(i)], 1e-5 + 1e-5 * std::abs(want[size_t(i)]))
            << "element " << i;
    }
}

// d/dw of sum(y * r) for the input and every parameter (a sample of each).
TEST(MultiLatentAttention, GradientsMatchFiniteDifferences) {
  for (bool q_lora : {true, false})
    for (bool flash : {false, true}) {
      SCOPED_TRACE(std::string(flash ? "flash" : "unfused") + (q_lora ? " q_lora" : ""));
      Layer l(flash, q_lora);
      Tensor x = random_tensor({kSeq, kBatch, kHidden}, 21);
      const Tensor r = random_tensor({kSeq, kBatch, kHidden}, 22);
      const MicroBatchInfo mb{};
      auto state = l.attention->make_state();
      auto loss_at = [&] {
        const Tensor& y = l.attention->forward(*state, x, mb, nullptr);
        double s = 0;
        for (int64_t i = 0; i < y.numel(); ++i)
          s += double(y.data<float>()[i]) * r.data<float>()[i];
        return s;
      };
      l.store.zero_grads();
      loss_at();
      Tensor dx = Tensor::zeros(x.shape(), DType::F32);
      l.attention->backward(*state, r, dx, mb, nullptr);
      const std::vector<float> d_in(dx.data<float>(), dx.data<float>() + dx.numel());
      std::mt19937 rng(5);
      auto check = [&](float* v, double analytic, const std::string& what) {
        const float saved = *v, eps = 1e-2f;
        *v = saved + eps;
        const double up = loss_at();
        *v = saved - eps;
        const double down = loss_at();
        *v = saved;
        const double numeric = (up - down) / (2.0 * eps);
        EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::abs(numeric)) << what;
      };
      for (int k = 0; k < 12; ++k) {
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(x.numel()));
        check(x.data<float>() + i, d_in[size_t(i)], "input[" + std::to_string(i) + "]");
      }
      int params = 0;
      for (Parameter* p : l.store.params()) {
        const std::vector<float> grad(p->grad.data<float>(),
                                      p->grad.data<float>() + p->grad.numel());
        for (int k = 0; k < 10; ++k) {
          const int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(p->weight.numel()));
          check(p->weight.data<float>() + i, grad[size_t(i)],
                p->name + "[" + std::to_string(i) + "]");
        }
        ++params;
      }
      EXPECT_EQ(params, q_lora ? 7 : 5);
    }
}

// Prefill two positions, then decode one at a time through the absorbed projections over the
// cached latents: the same rows as the full forward; the cache holds Rkv + Dr values a position.
TEST(MultiLatentAttention, CachedDecodingMatchesFullForward) {
  Layer l(false, true);
  const Tensor x = random_tensor({kSeq, kBatch, kHidden}, 31);
  MicroBatchInfo inference;
  inference.training = false;
  auto full_state = l.attention->make_state();
  const Tensor& full = l.attention->forward(*full_state, x, inference, nullptr);
  KvCache cache(1, kSeq);
  MicroBatchInfo step = inference;
  step.kv_cache = &cache;
  auto state = l.attention->make_state();
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 2}, {2, 1}, {3, 1}, {4, 1}}) {
    Tensor part = Tensor::empty({count, kBatch, kHidden}, DType::F32);
    std::copy_n(x.data<float>() + first * kBatch * kHidden, part.numel(), part.data<float>());
    const Tensor& y = l.attention->forward(*state, part, step, nullptr);
    ASSERT_EQ(y.shape(), (Shape{count, kBatch, kHidden}));
    EXPECT_EQ(cache.keys[0].shape(), (Shape{kBatch, 1, kSeq, kRkv}));
    EXPECT_EQ(cache.values[0].shape(), (Shape{kBatch, 1, kSeq, kDr}));
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_NEAR(y.data<float>()[i], full.data<float>()[first * kBatch * kHidden + i], 1e-5)
          << "positions from " << first << ", element " << i;
    cache.length += count;
  }
}

}  // namespace
}  // namespace megatron
