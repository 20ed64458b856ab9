// Self-attention whose head dimension (model.kv_channels) is not hidden / heads, as in
// Mistral-NeMo: the projections' shapes, the forward against a naive double-precision reference
// (GQA, rope over kv_channels, scale 1/sqrt(kv_channels)) on the unfused and flash paths,
// finite-difference gradients, and KV-cached decoding against the full forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/parallel/communicator.h"
#include "megatron/transformer/attention.h"
#include "tests/support/random_tensor.h"

namespace megatron {
namespace {

constexpr int64_t kHidden = 16, kHeads = 4, kGroups = 2, kDh = 6;  // default would be 4
constexpr int64_t kSeq = 5, kBatch = 2;

TransformerSpec spec(bool flash) {
  TransformerSpec t;
  t.num_layers = 1;
  t.hidden = kHidden;
  t.heads = kHeads;
  t.query_groups = kGroups;
  t.kv_channels = kDh;
  t.ffn = 24;
  t.seq_length = kSeq;
  t.rope = true;
  t.rope_theta = 100.0f;  // turns fast enough over 5 positions to matter
  t.bias = true;
  t.init_std = 0.3f;
  t.flash_attention = flash;
  return t;
}

using megatron::testing::random_tensor;

// One attention layer on a single process with its parameters initialised.
struct Layer {
  explicit Layer(bool flash)
      : tspec(spec(flash)), tp(parallel::make_single_process_communicator()) {
    const std::string prefix = "layers.0";
    attention = std::make_unique<SelfAttention>(SubmoduleArgs{store, prefix, 0, tspec, *tp, {}});
    store.finalize();
    store.initialize(7);
    // Non-zero biases, so that a misplaced bias row shows.
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    for (Parameter* p : store.params())
      if (p->name.find(".bias") != std::string::npos)
        for (int64_t i = 0; i < p->weight.numel(); ++i) p->weight.data<float>()[i] = dist(rng);
  }
  const float* w(const std::string& name) { return store.get(name).weight.data<float>(); }

  TransformerSpec tspec;
  std::unique_ptr<parallel::Communicator> tp;
  ParamStore store;
  std::unique_ptr<SelfAttention> attention;
};

// The layer's output [S, B, D] computed in double straight from the definition.
std::vector<double> naive_attention(Layer& l, const Tensor& x) {
  const int64_t D = kHidden, H = kHeads, G = kGroups, hpg = H / G, Dh = kDh;
  const int64_t width = (H + 2 * G) * Dh, half = Dh / 2;
  const float *wqkv = l.w("layers.0.attention.qkv.weight"),
              *bqkv = l.w("layers.0.attention.qkv.bias");
  const float *wp = l.w("layers.0.attention.proj.weight"),
              *bp = l.w("layers.0.attention.proj.bias");
  const math::RopeFrequencies freq(l.tspec.rope_theta);
  // qkv[t][b][row]: rows [G, hpg + 2, Dh]: the group's query heads, then its key and value.
  std::vector<double> qkv(static_cast<size_t>(kSeq * kBatch * width));
  for (int64_t t = 0; t < kSeq; ++t)
    for (int64_t b = 0; b < kBatch; ++b) {
      double* row = &qkv[static_cast<size_t>((t * kBatch + b) * width)];
      const float* xi = x.data<float>() + (t * kBatch + b) * D;
      for (int64_t o = 0; o < width; ++o) {
        double acc = bqkv[o];
        for (int64_t i = 0; i < D; ++i) acc += double(wqkv[o * D + i]) * xi[i];
        row[o] = acc;
      }
      // Rotary embedding over the whole head (rotate-half pairs i, i + Dh/2), queries and keys.
      for (int64_t g = 0; g < G; ++g)
        for (int64_t slot = 0; slot <= hpg; ++slot) {
          double* head = row + (g * (hpg + 2) + slot) * Dh;
          for (int64_t i = 0; i < half; ++i) {
            const double angle =
                static_cast<double>(t) * static_cast<double>(math::rope_inv_freq(i, Dh, freq));
            const double a = head[i], c = head[i + half];
            head[i] = a * std::cos(angle) - c * std::sin(angle);
            head[i + half] = c * std::cos(angle) + a * std::sin(angle);
          }
        }
    }
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  std::vector<double> out(static_cast<size_t>(kSeq * kBatch * D));
  for (int64_t t = 0; t < kSeq; ++t)
    for (int64_t b = 0; b < kBatch; ++b) {
      std::vector<double> o(static_cast<size_t>(H * Dh), 0.0);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / hpg;
        auto at = [&](int64_t pos, int64_t slot) {
          return &qkv[static_cast<size_t>((pos * kBatch + b) * width +
                                          (g * (hpg + 2) + slot) * Dh)];
        };
        const double* q = at(t, h % hpg);
        std::vector<double> p(static_cast<size_t>(t + 1));
        double top = -1e300, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < Dh; ++d) dot += q[d] * at(j, hpg)[d];
          p[static_cast<size_t>(j)] = dot * scale;
          top = std::max(top, p[static_cast<size_t>(j)]);
        }
        for (double& v : p) sum += (v = std::exp(v - top));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < Dh; ++d)
            o[static_cast<size_t>(h * Dh + d)] +=
                p[static_cast<size_t>(j)] / sum * at(j, hpg + 1)[d];
      }
      for (int64_t r = 0; r < D; ++r) {
        double acc = bp[r];
        for (int64_t k = 0; k < H * Dh; ++k)
          acc += double(wp[r * H * Dh + k]) * o[static_cast<size_t>(k)];
        out[static_cast<size_t>((t * kBatch + b) * D + r)] = acc;
      }
    }
  return out;
}

TEST(AttentionKvChannels, ProjectionsAreSizedByKvChannels) {
  Layer l(false);
  EXPECT_EQ(l.tspec.head_dim(), kDh);
  EXPECT_EQ(l.store.get("layers.0.attention.qkv.weight").weight.shape(),
            (Shape{(kHeads + 2 * kGroups) * kDh, kHidden}));
  EXPECT_EQ(l.store.get("layers.0.attention.qkv.bias").weight.shape(),
            (Shape{(kHeads + 2 * kGroups) * kDh}));
  EXPECT_EQ(l.store.get("layers.0.attention.proj.weight").weight.shape(),
            (Shape{kHidden, kHeads * kDh}));
  EXPECT_EQ(l.store.get("layers.0.attention.proj.bias").weight.shape(), (Shape{kHidden}));
}

TEST(AttentionKvChannels, ForwardMatchesNaiveReference) {
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "unfused");
    Layer l(flash);
    const Tensor x = random_tensor({kSeq, kBatch, kHidden}, 11);
    auto state = l.attention->make_state();
    const Tensor& y = l.attention->forward(*state, x, MicroBatchInfo{}, nullptr);
    ASSERT_EQ(y.shape(), (Shape{kSeq, kBatch, kHidden}));
    const std::vector<double> want = naive_attention(l, x);
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_NEAR(y.data<float>()[i], want[static_cast<size_t>(i)],
                  1e-5 + 1e-5 * std::abs(want[static_cast<size_t>(i)]))
          << "element " << i;
  }
}

// d/dw of sum(y * r) for the input and every parameter (a sample of each), both paths.
TEST(AttentionKvChannels, GradientsMatchFiniteDifferences) {
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash" : "unfused");
    Layer l(flash);
    Tensor x = random_tensor({kSeq, kBatch, kHidden}, 21);
    const Tensor r = random_tensor({kSeq, kBatch, kHidden}, 22);
    const MicroBatchInfo mb{};
    auto state = l.attention->make_state();
    auto loss_at = [&] {
      const Tensor& y = l.attention->forward(*state, x, mb, nullptr);
      double s = 0;
      for (int64_t i = 0; i < y.numel(); ++i) s += double(y.data<float>()[i]) * r.data<float>()[i];
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
      check(x.data<float>() + i, d_in[static_cast<size_t>(i)], "input[" + std::to_string(i) + "]");
    }
    int checked = 0;
    for (Parameter* p : l.store.params()) {
      // The gradients before any finite-difference forward touched the state.
      const std::vector<float> grad(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
      for (int k = 0; k < 10; ++k, ++checked) {
        const int64_t i = static_cast<int64_t>(rng() % static_cast<uint32_t>(p->weight.numel()));
        check(p->weight.data<float>() + i, grad[static_cast<size_t>(i)],
              p->name + "[" + std::to_string(i) + "]");
      }
    }
    EXPECT_EQ(checked, 40);
  }
}

// Prefill two positions, then decode one at a time: the same rows as the full forward.
TEST(AttentionKvChannels, CachedDecodingMatchesFullForward) {
  Layer l(false);
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
    EXPECT_EQ(cache.keys[0].shape(), (Shape{kBatch, kGroups, kSeq, kDh}));
    for (int64_t i = 0; i < y.numel(); ++i)
      EXPECT_NEAR(y.data<float>()[i], full.data<float>()[first * kBatch * kHidden + i], 1e-5)
          << "positions from " << first << ", element " << i;
    cache.length += count;
  }
}

}  // namespace
}  // namespace megatron
