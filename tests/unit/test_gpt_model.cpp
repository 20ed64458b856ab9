// Whole-model checks: finite-difference gradients of every parameter tensor for several GPT
// variants (one with model.kv_channels != hidden / heads, GPT-NeoX's parallel residual, OLMo-2's
// output norms and whole-projection q/k norms, a sandwich of input and output norms, GPT-OSS's
// attention sinks), and that the
// residual/tied/untied wiring gives the loss a hand computation expects.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "models/gpt/gpt_model.h"
#include "tests/support/gpt_model_test_util.h"

namespace megatron::models {
namespace {

struct Variant {
  const char* name;
  bool swiglu, rope, rmsnorm, tie, bias;
  int64_t groups;
  float hidden_dropout, attention_dropout;
  int64_t kv_channels;             // 0: hidden / heads
  bool parallel_residual = false;  // GPT-NeoX's blocks
  int64_t rotary_dims = 0;         // partial rotary (0: the whole head)
  bool qk_projection = false;      // q/k norms over the whole projection (OLMo-2)
  bool input_norms = true, output_norms = false;
  // Gemma's features: GeGLU, 1 + w norms (q/k norms too), a softmax scale, soft-capped scores
  // (flash) and logits, scaled embeddings, a local rope base on sliding-window layers.
  bool gemma = false;
  // GPT-OSS's blocks: learned sinks (flash), sliding-window and full layers, the clamped
  // quick-GELU unit.
  bool sinks = false;
};

void make_gemma(GPTSpec& s) {
  auto& t = s.transformer;
  t.glu_gate = math::GluGate::GeluTanh;
  t.norm_zero_centered_gamma = true;
  t.qk_norm = true;
  t.softmax_scale = 0.3f;
  t.attn_logit_softcap = 2.0f;
  t.flash_attention = true;
  t.window = 3;
  t.full_attention_layers = {1};
  t.rope_theta = 1000.0f;
  t.rope_local_theta = 50.0f;
  s.embedding_scale = 4.0f;
  s.final_logit_softcap = 3.0f;
}

GPTSpec tiny_spec(const Variant& v) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 2;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = v.groups;
  t.kv_channels = v.kv_channels;
  t.ffn = 24;
  t.seq_length = 6;
  t.norm = v.rmsnorm ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.swiglu = v.swiglu;
  t.rope = v.rope;
  t.bias = v.bias;
  t.parallel_residual = v.parallel_residual;
  t.rope_rotary_dims = v.rotary_dims;
  t.qk_norm = t.qk_norm_whole_projection = v.qk_projection;
  t.input_norms = v.input_norms;
  t.output_norms = v.output_norms;
  t.hidden_dropout = v.hidden_dropout;
  t.attention_dropout = v.attention_dropout;
  t.init_std = 0.2f;  // large enough that every path carries signal
  s.vocab_size = 29;
  s.padded_vocab_size = padded_vocab(29, 8, 1);
  s.max_positions = v.rope ? 0 : 8;
  s.tie_embeddings = v.tie;
  s.embedding_dropout = v.hidden_dropout;
  if (v.gemma) make_gemma(s);
  // With GPT-OSS's gated unit: quick GELU, offset 1, clamps at 3, wide enough that no value
  // crosses them within the differences' steps (where they bite: the kernel tests and
  // test_moe_model's GPT-OSS variant, which skips such kinks).
  if (v.sinks) {
    t.glu_gate = math::GluGate::QuickGelu;
    t.glu_limit = 3.0f;
    t.glu_offset = 1.0f;
    t.attention_sinks = TransformerSpec::Sinks::Learned;
    t.flash_attention = true;
    t.window = 3;
    t.full_attention_layers = {1};
  }
  return s;
}

MicroBatch random_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed) {
  MicroBatch mb = testing::random_decoder_batch(S, B, vocab, seed, MicroBatchInfo{3, 5, true});
  mb.labels.data<int32_t>()[3] = kIgnoreIndex;  // an ignored label must not matter
  return mb;
}

class GPTGradientCheck : public ::testing::TestWithParam<Variant> {};

TEST_P(GPTGradientCheck, EveryParameterMatchesFiniteDifferences) {
  const Variant v = GetParam();
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  GPTModel model(tiny_spec(v), store, *tp);
  store.finalize();
  store.initialize(42);
  const MicroBatch mb = random_batch(6, 3, 29, 7);
  GPTModel::Activations act;

  const float scale = 1.0f / 17.0f;
  store.zero_grads();
  model.forward(act, mb);
  model.backward(act, mb, LossWeights{scale, 0.0f});

  auto loss_at = [&] { return model.forward(act, mb).lm * scale; };
  std::mt19937 rng(11);
  int checked = 0;
  for (Parameter* p : store.params()) {
    const int64_t n = p->weight.numel();
    for (int k = 0; k < 6; ++k) {
      const int64_t i = static_cast<int64_t>(rng() % n);
      float& w = p->weight.data<float>()[i];
      const float saved = w;
      const float eps = 1e-2f;
      w = saved + eps;
      const double up = loss_at();
      w = saved - eps;
      const double down = loss_at();
      w = saved;
      const double numeric = (up - down) / (2.0 * eps);
      const double analytic = p->grad.data<float>()[i];
      EXPECT_NEAR(analytic, numeric, 2e-4 + 3e-2 * std::abs(numeric))
          << v.name << ": " << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, GPTGradientCheck,
    ::testing::Values(Variant{"gpt", false, false, false, true, true, 4, 0.0f, 0.0f, 0},
                      Variant{"gpt_untied_gqa", false, false, false, false, true, 2, 0.0f, 0.0f, 0},
                      Variant{"llama_style", true, true, true, false, false, 2, 0.0f, 0.0f, 0},
                      Variant{"gpt_dropout", false, false, false, true, true, 4, 0.1f, 0.1f, 0},
                      // head dim 6, not 16 / 4: query width 24 != hidden (Mistral-NeMo-like)
                      Variant{"llama_kv_channels", true, true, true, false, false, 2, 0.0f, 0.0f,
                              6},
                      // GPT-NeoX: the parallel residual, 2 of each 4-dim head turning, untied
                      Variant{"neox", false, true, false, false, true, 4, 0.0f, 0.0f, 0, true, 2},
                      // OLMo-2: norms on the sub-layers' outputs only, q/k norms over the whole
                      // projections
                      Variant{"olmo2", true, true, true, false, false, 2, 0.0f, 0.0f, 0, false, 0,
                              true, false, true},
                      // input and output norms (Gemma's sandwich) with residual dropout
                      Variant{"sandwich_dropout", true, true, true, true, false, 2, 0.1f, 0.0f, 0,
                              false, 0, false, true, true},
                      // Gemma 2/3: sandwich norms and the make_gemma features, attention dropout
                      Variant{"gemma", true, true, true, true, false, 2, 0.0f, 0.1f, 0, false, 0,
                              false, true, true, true},
                      // GPT-OSS: attention sinks, biases, a sliding window, attention dropout
                      Variant{"gpt_oss_sinks", true, true, true, false, true, 2, 0.0f, 0.1f, 0,
                              false, 0, false, true, false, false, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GPTModel, InitialLossIsNearUniform) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  GPTSpec spec = tiny_spec({"gpt", false, false, false, true, true, 4, 0, 0, 0});
  spec.transformer.init_std = 0.002f;
  GPTModel model(spec, store, *tp);
  store.finalize();
  store.initialize(1);
  const MicroBatch mb = random_batch(6, 3, 29, 9);
  GPTModel::Activations act;
  const double total = model.forward(act, mb).lm;
  // Tiny weights -> near-uniform over the 29 real tokens (padding columns are excluded).
  EXPECT_NEAR(total / (6 * 3 - 1), std::log(29.0), 0.02);
}

TEST(GPTModel, GradientsAccumulateOverMicroBatches) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  GPTModel model(tiny_spec({"gpt", false, false, false, true, true, 4, 0, 0, 0}), store, *tp);
  store.finalize();
  store.initialize(5);
  const MicroBatch mb = random_batch(6, 2, 29, 3);
  GPTModel::Activations act;
  store.zero_grads();
  model.forward(act, mb);
  model.backward(act, mb, LossWeights{1.0f, 0.0f});
  const Tensor once = store.grads().clone();
  model.forward(act, mb);
  model.backward(act, mb, LossWeights{1.0f, 0.0f});
  for (int64_t i = 0; i < once.numel(); i += 7)
    EXPECT_NEAR(store.grads().data<float>()[i], 2.0f * once.data<float>()[i],
                1e-5 + 1e-5 * std::abs(once.data<float>()[i]));
}

}  // namespace
}  // namespace megatron::models
