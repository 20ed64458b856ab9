// BERT: finite-difference gradient checks of the post-LN block (with a padding mask), the
// embeddings (word + position + token type, LayerNorm), the masked-LM head (tied decoder with
// bias), the sentence-pair head and the whole model; padded keys masked out of the block.
// A plain-loop forward and pipeline-stage and micro-batch splits: test_bert_model.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "models/bert/bert_model.h"
#include "tests/support/bert_model_test_util.h"

namespace megatron::models {
namespace {

using testing::perturb_biases;
using testing::random_batch;
using testing::tiny_spec;

Tensor random_tensor(const Shape& shape, uint32_t seed, float std = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

double dot(const Tensor& a, const Tensor& b) {
  double s = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i)
    s += static_cast<double>(a.data<float>()[i]) * b.data<float>()[i];
  return s;
}

// Central differences at steps h and h/2 combined by Richardson extrapolation (error O(h^4)):
// two estimates checked against each other in one number.
double numeric_grad(float& w, const std::function<double()>& objective, float h = 1e-2f) {
  const float saved = w;
  auto central = [&](float step) {
    const float up = saved + step, down = saved - step;
    w = up;
    const double f_up = objective();
    w = down;
    const double f_down = objective();
    w = saved;
    return (f_up - f_down) / (static_cast<double>(up) - static_cast<double>(down));
  };
  const double coarse = central(h), fine = central(h / 2);
  return (4.0 * fine - coarse) / 3.0;
}

// Compares `grad` with finite differences of `objective` at `samples` elements of `value`,
// half of them where the gradient is non-zero (sparse embedding rows). Returns the count.
int check_elements(Tensor& value, const Tensor& grad, const std::function<double()>& objective,
                   const std::string& what, std::mt19937& rng, int samples = 6) {
  std::vector<int64_t> nonzero;
  for (int64_t i = 0; i < grad.numel(); ++i)
    if (grad.data<float>()[i] != 0.0f) nonzero.push_back(i);
  int checked = 0;
  for (int k = 0; k < samples; ++k) {
    const bool pick_nonzero = k % 2 == 0 && !nonzero.empty();
    const int64_t i = pick_nonzero ? nonzero[rng() % nonzero.size()]
                                   : static_cast<int64_t>(rng() % value.numel());
    const double numeric = numeric_grad(value.data<float>()[i], objective);
    const double analytic = grad.data<float>()[i];
    EXPECT_NEAR(analytic, numeric, 3e-4 + 2e-2 * std::abs(numeric)) << what << "[" << i << "]";
    ++checked;
  }
  return checked;
}

int check_params(ParamStore& store, const std::function<double()>& objective, uint32_t seed) {
  std::mt19937 rng(seed);
  int checked = 0;
  for (Parameter* p : store.params())
    checked += check_elements(p->weight, p->grad, objective, p->name, rng);
  return checked;
}

// ---- the post-LN block ------------------------------------------------------------------

class PostNormBlock : public ::testing::TestWithParam<float> {};

TEST_P(PostNormBlock, GradientsMatchFiniteDifferences) {
  const float dropout = GetParam();
  TransformerSpec t = tiny_spec(dropout).transformer;
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  TransformerBlock block(store, "layers.0", 0, t, *tp);
  store.finalize();
  store.initialize(3);
  perturb_biases(store, 4);
  const MicroBatch mb = random_batch(8, 3, 5);
  const uint8_t* mask = mb.padding_mask.data<uint8_t>();
  Tensor x = random_tensor({8, 3, 16}, 6);
  const Tensor r = random_tensor({8, 3, 16}, 7, 0.3f);  // objective = sum(out * r)
  TransformerBlock::Ctx ctx;
  auto objective = [&] { return dot(block.forward(ctx, x, mb.info, mask), r); };

  store.zero_grads();
  objective();
  Tensor dx = Tensor::empty(x.shape(), DType::F32);
  block.backward(ctx, r, dx, mb.info, mask);
  std::mt19937 rng(8);
  EXPECT_GT(check_params(store, objective, 9), 50);
  check_elements(x, dx, objective, "dx", rng, 12);
}

INSTANTIATE_TEST_SUITE_P(Dropout, PostNormBlock, ::testing::Values(0.0f, 0.1f),
                         [](const auto& info) { return info.param > 0 ? "dropout" : "plain"; });

TEST(PostNormBlockMask, PaddedKeysDoNotReachRealPositions) {
  TransformerSpec t = tiny_spec().transformer;
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  TransformerBlock block(store, "layers.0", 0, t, *tp);
  store.finalize();
  store.initialize(3);
  const MicroBatch mb = random_batch(8, 3, 5);  // sample 1 has 6 real tokens
  Tensor x = random_tensor({8, 3, 16}, 6);
  TransformerBlock::Ctx ctx;
  const Tensor before = block.forward(ctx, x, mb.info, mb.padding_mask.data<uint8_t>()).clone();
  for (int64_t d = 0; d < 16; ++d) x.data<float>()[(7 * 3 + 1) * 16 + d] += 5.0f;  // s=7, b=1
  const Tensor& after = block.forward(ctx, x, mb.info, mb.padding_mask.data<uint8_t>());
  for (int64_t s = 0; s < 8; ++s)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t d = 0; d < 16; ++d) {
        const int64_t i = (s * 3 + b) * 16 + d;
        if (s == 7 && b == 1) continue;  // the changed (padded) row itself
        EXPECT_EQ(after.data<float>()[i], before.data<float>()[i]) << "s=" << s << " b=" << b;
      }
  // Without the mask the padded key is attended to: real positions of sample 1 change.
  block.forward(ctx, x, mb.info, nullptr);
  EXPECT_NE(ctx.out.data<float>()[(0 * 3 + 1) * 16], before.data<float>()[(0 * 3 + 1) * 16]);
}

// ---- embeddings and heads as stages of a model without blocks ---------------------------

TEST(BertEmbeddings, GradientsMatchFiniteDifferences) {
  for (const bool dropout : {false, true}) {
    SCOPED_TRACE(dropout ? "dropout" : "plain");
    auto tp = parallel::make_single_process_communicator();
    ParamStore store;
    BertModel model(tiny_spec(dropout ? 0.1f : 0.0f), store, *tp, ModelStage{0, 0, true, false});
    store.finalize();
    store.initialize(11);
    perturb_biases(store, 12);
    const MicroBatch mb = random_batch(8, 3, 13);
    const Tensor r = random_tensor({8, 3, 16}, 14);
    auto act = model.make_activations();
    auto objective = [&] {
      model.forward(*act, mb);
      return dot(model.output(*act), r);
    };
    store.zero_grads();
    objective();
    model.backward(*act, mb, LossWeights{}, {}, &r);
    EXPECT_EQ(store.params().size(), 5u);  // word, position, token type, norm weight and bias
    EXPECT_GT(check_params(store, objective, 15), 25);
  }
}

struct HeadCase {
  const char* name;
  bool binary_head;
  LossWeights weights;
};

void PrintTo(const HeadCase& c, std::ostream* os) { *os << c.name; }

class BertHeads : public ::testing::TestWithParam<HeadCase> {};

TEST_P(BertHeads, GradientsMatchFiniteDifferences) {
  const HeadCase c = GetParam();
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  // A last stage with no blocks: the heads straight on hidden_in.
  BertModel model(tiny_spec(0.0f, c.binary_head), store, *tp, ModelStage{2, 0, false, true});
  store.finalize();
  store.initialize(21);
  perturb_biases(store, 22);
  const MicroBatch mb = random_batch(8, 3, 23);
  Tensor hidden = random_tensor({8, 3, 16}, 24);
  auto act = model.make_activations();
  auto objective = [&] {
    const LossSums l = model.forward(*act, mb, &hidden);
    return c.weights.lm * l.lm + c.weights.aux * l.aux;
  };
  store.zero_grads();
  objective();
  Tensor d_hidden = Tensor::empty(hidden.shape(), DType::F32);
  model.backward(*act, mb, c.weights, {}, nullptr, &d_hidden);
  EXPECT_GT(check_params(store, objective, 25), 20);
  std::mt19937 rng(26);
  check_elements(hidden, d_hidden, objective, "d_hidden", rng, 16);
  if (c.weights.lm == 0.0f) {  // only the [CLS] rows feed the sentence-pair head
    for (int64_t i = 3 * 16; i < d_hidden.numel(); ++i) ASSERT_EQ(d_hidden.data<float>()[i], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, BertHeads,
                         ::testing::Values(HeadCase{"mlm_only", false, {0.3f, 0.0f}},
                                           HeadCase{"sentence_pair_only", true, {0.0f, 0.7f}},
                                           HeadCase{"both", true, {1.0f / 13.0f, 0.7f}}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- the whole model ---------------------------------------------------------------------

struct ModelCase {
  const char* name;
  float dropout;
  bool binary_head, token_types;
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

class BertGradientCheck : public ::testing::TestWithParam<ModelCase> {};

TEST_P(BertGradientCheck, EveryParameterMatchesFiniteDifferences) {
  const ModelCase c = GetParam();
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(tiny_spec(c.dropout, c.binary_head), store, *tp);
  store.finalize();
  store.initialize(31);
  perturb_biases(store, 32);
  MicroBatch mb = random_batch(8, 3, 33);
  if (!c.token_types) mb.token_types = Tensor();
  const LossWeights weights{1.0f / 13.0f, c.binary_head ? 0.7f : 0.0f};
  auto act = model.make_activations();
  auto objective = [&] {
    const LossSums l = model.forward(*act, mb);
    return weights.lm * l.lm + weights.aux * l.aux;
  };
  store.zero_grads();
  objective();
  model.backward(*act, mb, weights);
  EXPECT_GT(check_params(store, objective, 34), 150);
}

INSTANTIATE_TEST_SUITE_P(Variants, BertGradientCheck,
                         ::testing::Values(ModelCase{"bert", 0.0f, true, true},
                                           ModelCase{"bert_dropout", 0.1f, true, true},
                                           ModelCase{"mlm_only", 0.0f, false, true},
                                           ModelCase{"no_token_types", 0.0f, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace megatron::models
