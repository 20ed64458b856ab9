// GPT models with MoE layers (megatron/transformer/moe): finite-difference gradients of every
// parameter (router, experts, shared expert, the dense rest) with the router's aux and z losses
// in the objective; tokens that all go to some experts leave the others with exactly zero
// gradients; capacity drops; the statistics the layers record.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "megatron/transformer/moe/moe_layer.h"
#include "models/gpt/gpt_model.h"
#include "tests/support/gpt_model_test_util.h"
#include "tests/support/moe_test_util.h"

namespace megatron::models {
namespace {

using config::MoeLoadBalancing;
using config::MoeScoreFunction;

struct Variant {
  const char* name;
  bool swiglu;
  moe::MoeSpec moe;
  uint32_t batch_seed = 7;  // a batch without near-ties in routing (see the kink check)
  // GPT-OSS's blocks: quick-GELU gated experts (and MLP) with clamps and offset 1, attention
  // sinks, biases everywhere (router and experts too).
  bool gpt_oss = false;
  float glu_limit = 2.0f;  // some values are clamped, few close enough to the clamps for kinks
};

moe::MoeSpec base_moe(int64_t E, int64_t k) {
  moe::MoeSpec m;
  m.router.num_experts = E;
  m.router.topk = k;
  m.router.balancing = MoeLoadBalancing::AuxLoss;
  m.router.aux_loss_coeff = 0.5f;
  m.router.z_loss_coeff = 0.1f;
  m.expert_ffn = 12;
  return m;
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"softmax_top2_gelu", false, base_moe(4, 2)});
  moe::MoeSpec sig = base_moe(4, 2);
  sig.router.score = MoeScoreFunction::Sigmoid;
  sig.router.balancing = MoeLoadBalancing::SeqAuxLoss;
  sig.expert_bias = true;
  sig.shared_ffn = 8;
  v.push_back({"sigmoid_seq_aux_shared_swiglu", true, sig});
  moe::MoeSpec cap = base_moe(4, 1);
  cap.capacity_factor = 1.5;
  cap.drop_policy = config::MoeTokenDropPolicy::Position;
  cap.router.pre_softmax = true;
  cap.layers.every = 2;  // layer 0 MoE, layer 1 dense
  v.push_back({"capacity_top1_every_other", true, cap, 8});
  // Qwen2-MoE's layer: softmax over all experts, top-k not renormalized, a gated shared expert.
  moe::MoeSpec qwen = base_moe(4, 2);
  qwen.router.pre_softmax = true;
  qwen.shared_ffn = 8;
  qwen.shared_gate = true;
  v.push_back({"pre_softmax_gated_shared_swiglu", true, qwen});
  moe::MoeSpec oss = base_moe(4, 2);
  oss.linear_bias = true;  // GPT-OSS's router and expert biases
  v.push_back({"gpt_oss_clamped_quick_geglu_sinks_biases", true, oss, 7, true});
  return v;
}

GPTSpec tiny_spec(bool swiglu) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 2;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 4;
  t.ffn = 24;
  t.seq_length = 6;
  t.swiglu = swiglu;
  t.norm = swiglu ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.rope = swiglu;
  t.bias = !swiglu;
  t.init_std = 0.2f;
  s.vocab_size = 29;
  s.padded_vocab_size = padded_vocab(29, 8, 1);
  s.max_positions = swiglu ? 0 : 8;
  return s;
}

MicroBatch random_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed) {
  return testing::random_decoder_batch(S, B, vocab, seed, MicroBatchInfo{3, 5, true});
}

struct MoeModel {
  std::unique_ptr<parallel::Communicator> tp = parallel::make_single_process_communicator();
  std::unique_ptr<parallel::Communicator> ep = parallel::make_single_process_communicator("ep");
  std::shared_ptr<moe::MoeState> state;
  ParamStore store;
  std::unique_ptr<GPTModel> model;
  MoeModel(const Variant& v) {
    state = std::make_shared<moe::MoeState>(v.moe);
    GPTSpec spec = tiny_spec(v.swiglu);
    if (v.gpt_oss) {
      auto& t = spec.transformer;
      t.glu_gate = math::GluGate::QuickGelu;
      t.glu_limit = v.glu_limit;
      t.glu_offset = 1.0f;
      t.bias = true;
      t.attention_sinks = TransformerSpec::Sinks::Learned;
      t.flash_attention = true;
    }
    model = std::make_unique<GPTModel>(spec, store, *tp, GPTStage{}, nullptr,
                                       moe::moe_submodules({ep.get(), tp.get()}, state));
    store.finalize();
    store.initialize(42);
    if (v.gpt_oss) {  // non-zero biases (they start at zero), so that a misplaced one shows
      std::mt19937 rng(5);
      std::normal_distribution<float> dist(0.0f, 0.05f);
      for (Parameter* p : store.params())
        if (p->name.find(".bias") != std::string::npos)
          for (int64_t i = 0; i < p->weight.numel(); ++i) p->weight.data<float>()[i] = dist(rng);
    }
    if (v.moe.expert_bias) {
      std::vector<float>& b = state->expert_bias(0);
      for (size_t e = 0; e < b.size(); ++e) b[e] = 0.05f * static_cast<float>(e);
    }
  }
};

class MoeGradientCheck : public ::testing::TestWithParam<Variant> {};

// objective = lm * scale + w * (aux + z), the router terms entering backward with w.
TEST_P(MoeGradientCheck, EveryParameterMatchesFiniteDifferences) {
  const Variant v = GetParam();
  MoeModel m(v);
  const MicroBatch mb = random_batch(6, 3, 29, v.batch_seed);
  GPTModel::Activations act;
  const float scale = 1.0f / 17.0f, w = 0.7f;
  m.state->set_loss_weight(w);
  m.store.zero_grads();
  m.model->forward(act, mb);
  (void)m.state->take_forward_loss();
  m.model->backward(act, mb, LossWeights{scale, 0.0f});
  auto objective = [&] {
    const double lm = m.model->forward(act, mb).lm * scale;
    return lm + w * m.state->take_forward_loss();
  };
  std::mt19937 rng(11);
  int checked = 0, kinks = 0;
  bool saw_router = false, saw_expert = false, saw_gate = false;
  for (Parameter* p : m.store.params()) {
    const int64_t n = p->weight.numel();
    for (int c = 0; c < 6; ++c) {
      const int64_t i = static_cast<int64_t>(rng() % n);
      float& x = p->weight.data<float>()[i];
      const float saved = x;
      auto fd = [&](float eps) {
        x = saved + eps;
        const double up = objective();
        x = saved - eps;
        const double down = objective();
        x = saved;
        return (up - down) / (2.0 * eps);
      };
      const double n1 = fd(1e-2f), n2 = fd(5e-3f);
      // A routing decision that flips inside the interval makes the loss jump: skip it.
      if (std::abs(n1 - n2) > 2e-3 + 0.05 * std::abs(n2)) {
        ++kinks;
        continue;
      }
      const double analytic = p->grad.data<float>()[i];
      EXPECT_NEAR(analytic, n2, 3e-4 + 3e-2 * std::abs(n2))
          << v.name << ": " << p->name << "[" << i << "]";
      ++checked;
      saw_router = saw_router || p->name.find("router") != std::string::npos;
      saw_expert = saw_expert || p->expert;
      saw_gate = saw_gate || p->name.find("shared_experts.gate_weight") != std::string::npos;
    }
  }
  EXPECT_GT(checked, 60);
  EXPECT_LT(kinks, checked / 10 + 1) << checked << " checked";
  EXPECT_TRUE(saw_router && saw_expert);
  EXPECT_EQ(saw_gate, v.moe.shared_gate);
}

// The gradient check's GPT-OSS clamps bite: the same weights give another loss without them.
TEST(MoeGptOss, TheClampsOfTheGradientCheckBite) {
  Variant v = variants().back();
  ASSERT_TRUE(v.gpt_oss);
  const MicroBatch mb = random_batch(6, 3, 29, v.batch_seed);
  GPTModel::Activations act;
  MoeModel clamped(v);
  const double with = clamped.model->forward(act, mb).lm;
  v.glu_limit = 1e6f;
  MoeModel free(v);
  const double without = free.model->forward(act, mb).lm;
  EXPECT_GT(std::abs(with - without), 1e-4 * std::abs(with)) << with << " vs " << without;
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeGradientCheck, ::testing::ValuesIn(variants()),
                         [](const auto& info) { return std::string(info.param.name); });

// All logits equal (router weight zero): every token picks experts 0 and 1 (ties go to the lower
// index); experts 2 and 3 receive nothing, and their gradients are exactly zero, while the
// others' are not.
TEST(MoeModel, ExpertsWithoutTokensGetZeroGradients) {
  Variant v{"forced", false, base_moe(4, 2)};
  MoeModel m(v);
  for (Parameter* p : m.store.params())
    if (p->name.find("router") != std::string::npos) p->weight.zero_();
  const MicroBatch mb = random_batch(6, 3, 29, 9);
  GPTModel::Activations act;
  m.state->set_loss_weight(1.0f);
  m.store.zero_grads();
  m.model->forward(act, mb);
  m.model->backward(act, mb, LossWeights{0.1f, 0.0f});
  for (Parameter* p : m.store.params()) {
    if (!p->expert) continue;
    double norm = 0;
    for (int64_t i = 0; i < p->grad.numel(); ++i) norm += std::abs(p->grad.data<float>()[i]);
    const bool idle = p->name.find("experts.2.") != std::string::npos ||
                      p->name.find("experts.3.") != std::string::npos;
    if (idle)
      EXPECT_EQ(norm, 0.0) << p->name;
    else
      EXPECT_GT(norm, 0.0) << p->name;
  }
  const auto& st = m.state->all_stats().at(0);
  ASSERT_EQ(st.tokens_per_expert.size(), 4u);
  EXPECT_EQ(st.tokens_per_expert[0], 18.0);
  EXPECT_EQ(st.tokens_per_expert[1], 18.0);
  EXPECT_EQ(st.tokens_per_expert[2], 0.0);
  EXPECT_EQ(st.tokens_per_expert[3], 0.0);
  EXPECT_EQ(st.routed, 36);
  EXPECT_EQ(st.dropped, 0);
}

// Capacity 1.0 with top-1 over 4 experts and all tokens on expert 0: ceil(18 / 4) = 5 kept.
TEST(MoeModel, CapacityDropsTheOverflowAndCountsIt) {
  moe::MoeSpec spec = base_moe(4, 1);
  spec.capacity_factor = 1.0;
  spec.drop_policy = config::MoeTokenDropPolicy::Position;
  Variant v{"capacity", false, spec};
  MoeModel m(v);
  for (Parameter* p : m.store.params())
    if (p->name.find("router") != std::string::npos) p->weight.zero_();
  const MicroBatch mb = random_batch(6, 3, 29, 9);
  GPTModel::Activations act;
  m.store.zero_grads();
  m.model->forward(act, mb);
  m.model->backward(act, mb, LossWeights{0.1f, 0.0f});
  for (int64_t layer : {0, 1}) {
    const auto& st = m.state->all_stats().at(layer);
    EXPECT_EQ(st.tokens_per_expert[0], 18);
    EXPECT_EQ(st.dropped, 13);
  }
}

// global_aux_loss on one rank: micro-batch m's loss uses the mean of the counts of the step's
// micro-batches 0..m (Megatron's running mean) with its own probabilities; a recomputed forward
// of an earlier micro-batch gets that micro-batch's loss again; a new iteration starts afresh
// and evaluation uses the micro-batch's own counts. The expected values come from the router's
// functions (checked against the naive formula in test_moe_router) on logits computed here.
TEST(MoeModel, GlobalAuxLossAveragesTheCountsOfTheStepsMicroBatches) {
  moe::MoeSpec spec = base_moe(4, 2);
  spec.router.balancing = MoeLoadBalancing::GlobalAuxLoss;
  spec.router.z_loss_coeff = 0.0f;
  const TransformerSpec t = tiny_spec(false).transformer;
  auto tp = parallel::make_single_process_communicator();
  auto ep = parallel::make_single_process_communicator("ep");
  auto state = std::make_shared<moe::MoeState>(spec);
  ParamStore store;
  const std::string prefix = "layers.0";
  const BlockSubmodules subs = moe::moe_submodules({ep.get(), tp.get()}, state);
  const std::unique_ptr<MlpLayer> layer = subs.mlp(SubmoduleArgs{store, prefix, 0, t, *tp, {}});
  store.finalize();
  store.initialize(42);
  const Parameter* router = nullptr;
  for (const Parameter* p : store.params())
    if (p->name == "layers.0.mlp.router.weight") router = p;
  ASSERT_NE(router, nullptr);
  const int64_t S = 6, B = 2, D = t.hidden, E = 4, T = S * B;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Tensor> inputs;
  std::vector<moe::Routing> routings;
  for (int m = 0; m < 3; ++m) {
    Tensor x = Tensor::empty({S, B, D}, DType::F32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = normal(rng);
    routings.push_back(moe::testing::naive_routing(x, router->weight, spec.router));
    inputs.push_back(x);
  }
  auto counts_of = [&](int m) { return moe::balance_counts(routings[m], spec.router, B); };
  auto expected = [&](int m, int first) {  // mean of micro-batches first..m
    std::vector<double> mean(E, 0.0);
    for (int j = first; j <= m; ++j)
      for (int64_t e = 0; e < E; ++e) mean[e] += counts_of(j)[e] / (m - first + 1);
    return moe::balance_loss(routings[m], spec.router, mean, T, B).loss;
  };
  auto forward = [&](int m, int64_t iteration, bool training) {
    auto st = layer->make_state();
    (void)state->take_forward_loss();
    layer->forward(*st, inputs[m], MicroBatchInfo{iteration, m * B, training});
    return state->take_forward_loss();
  };
  const double kTol = 1e-7;  // the layer's fp32 router GEMM vs the double dot products here
  std::vector<double> first_pass;
  for (int m = 0; m < 3; ++m) {
    first_pass.push_back(forward(m, 1, true));
    EXPECT_NEAR(first_pass[m], expected(m, 0), kTol) << "micro " << m;
  }
  // The case is what it claims: the mean over micro-batches matters.
  EXPECT_GT(std::abs(expected(2, 0) - expected(2, 2)), 100 * kTol);
  EXPECT_EQ(forward(0, 1, true), first_pass[0]);  // recomputation
  EXPECT_EQ(forward(1, 1, true), first_pass[1]);
  EXPECT_NEAR(forward(2, 2, true), expected(2, 2), kTol);   // a new step
  EXPECT_NEAR(forward(1, 2, false), expected(1, 1), kTol);  // evaluation: its own counts
  // Entries count up to the micro-batch's own offset only (step 2 saw offset 4 first).
  EXPECT_NEAR(forward(1, 2, true), expected(1, 1), kTol);
}

}  // namespace
}  // namespace megatron::models
