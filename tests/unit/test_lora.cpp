// LoRA (megatron/transformer/lora.h) on the decoder's four projections: the adapted model equals
// the model with merged weights W + (alpha / r) B A (gated SwiGLU fc1 included), the adapters'
// gradients match finite differences, B = 0 reproduces the base model, and with peft: lora the
// registry freezes everything but the adapters.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "models/gpt/gpt_model.h"
#include "models/registry.h"
#include "tests/support/gpt_model_test_util.h"

namespace megatron::models {
namespace {

constexpr int64_t kRank = 3;
constexpr float kAlpha = 6.0f;

GPTSpec spec(bool lora, bool swiglu) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 2;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 2;
  t.ffn = 24;
  t.seq_length = 6;
  t.rope = swiglu;
  t.swiglu = swiglu;
  t.norm = swiglu ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.init_std = 0.2f;
  if (lora) {
    t.lora = LoraSpec{kRank, kAlpha};
    t.lora_qkv = t.lora_proj = t.lora_fc1 = t.lora_fc2 = true;
  }
  s.vocab_size = 29;
  s.padded_vocab_size = padded_vocab(29, 8, 1);
  s.max_positions = swiglu ? 0 : 8;
  return s;
}

// Gives every adapter's B random values (B = 0 at init would hide A's gradient and the update).
void randomize_b(ParamStore& store) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 0.3f);
  for (Parameter* p : store.params())
    if (p->name.find(".lora_b.") != std::string::npos)
      for (int64_t i = 0; i < p->weight.numel(); ++i) p->weight.data<float>()[i] = n(rng);
}

// W + scale * B A for the weight of every adapted projection of `with`, written into `plain`.
void merge_into(ParamStore& with, ParamStore& plain) {
  const float scale = kAlpha / kRank;
  for (Parameter* p : plain.params()) {
    Parameter& w = with.get(p->name);
    p->weight.copy_from(w.weight);
    const std::string base = p->name.substr(0, p->name.size() - std::string(".weight").size());
    if (p->name.find(".bias") != std::string::npos) continue;
    if (p->name.find("attention.") == std::string::npos &&
        p->name.find("mlp.") == std::string::npos)
      continue;
    Parameter& a = with.get(base + ".lora_a.weight");
    Parameter& b = with.get(base + ".lora_b.weight");
    const int64_t in = a.weight.dim(1), out = p->weight.numel() / in;
    const float* A = a.weight.data<float>();
    const float* B = b.weight.data<float>();  // [out, r] in row order, gated halves included
    float* W = p->weight.data<float>();
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < kRank; ++k) acc += double(B[o * kRank + k]) * A[k * in + i];
        W[o * in + i] += static_cast<float>(scale * acc);
      }
  }
}

TEST(LoRA, AdaptedModelEqualsMergedWeights) {
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "llama-like" : "gpt-like");
    auto tp = parallel::make_single_process_communicator();
    ParamStore with, plain;
    GPTModel adapted(spec(true, swiglu), with, *tp), merged(spec(false, swiglu), plain, *tp);
    with.finalize();
    plain.finalize();
    with.initialize(42);
    const MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 7, MicroBatchInfo{0, 0, true});
    GPTModel::Activations a1, a2;
    // B = 0: the adapters change nothing.
    merge_into(with, plain);
    const double base = adapted.forward(a1, mb).lm;
    EXPECT_NEAR(base, merged.forward(a2, mb).lm, 1e-6 * std::abs(base));
    randomize_b(with);
    merge_into(with, plain);
    const double lora = adapted.forward(a1, mb).lm, want = merged.forward(a2, mb).lm;
    EXPECT_GT(std::abs(lora - base), 1e-3 * std::abs(base));  // the adapters do something
    EXPECT_NEAR(lora, want, 2e-5 * std::abs(want));
  }
}

// With and without dropout on the adapters' input (its masks are fixed per step and site).
TEST(LoRA, AdapterGradientsMatchFiniteDifferences) {
  for (const auto& [swiglu, dropout] : {std::pair{false, 0.0f}, std::pair{true, 0.0f},
                                        std::pair{false, 0.3f}, std::pair{true, 0.3f}}) {
    SCOPED_TRACE(::testing::Message()
                 << (swiglu ? "llama-like" : "gpt-like") << " dropout " << dropout);
    auto tp = parallel::make_single_process_communicator();
    ParamStore store;
    GPTSpec s = spec(true, swiglu);
    s.transformer.lora.dropout = dropout;
    GPTModel model(s, store, *tp);
    for (Parameter* p : store.params()) p->frozen = !is_lora_parameter(p->name);
    store.finalize();
    store.initialize(42);
    randomize_b(store);
    const MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 9, MicroBatchInfo{0, 0, true});
    GPTModel::Activations act;
    const float w = 1.0f / 17.0f;
    store.zero_grads();
    model.forward(act, mb);
    model.backward(act, mb, LossWeights{w, 0.0f});
    std::mt19937 rng(3);
    int checked = 0;
    for (Parameter* p : store.params()) {
      if (p->frozen) continue;
      ASSERT_TRUE(is_lora_parameter(p->name)) << p->name;
      for (int k = 0; k < 4; ++k) {
        const int64_t i = static_cast<int64_t>(rng() % p->weight.numel());
        float& x = p->weight.data<float>()[i];
        const float saved = x, eps = 1e-2f;
        x = saved + eps;
        const double up = model.forward(act, mb).lm * w;
        x = saved - eps;
        const double down = model.forward(act, mb).lm * w;
        x = saved;
        const double fd = (up - down) / (2 * eps), got = p->grad.data<float>()[i];
        EXPECT_NEAR(got, fd, 2e-4 + 3e-2 * std::abs(fd)) << p->name << "[" << i << "]";
        ++checked;
      }
    }
    EXPECT_EQ(checked, 2 * 4 * 4 * 2);  // 2 layers x 4 projections x (A, B) x 4 samples
  }
}

// LoRA dropout changes the training loss, not the evaluation one.
TEST(LoRA, DropoutOnlyWhileTraining) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore plain_store, drop_store;
  GPTSpec with = spec(true, true);
  with.transformer.lora.dropout = 0.3f;
  GPTModel plain(spec(true, true), plain_store, *tp), dropped(with, drop_store, *tp);
  for (ParamStore* st : {&plain_store, &drop_store}) {
    st->finalize();
    st->initialize(42);
    randomize_b(*st);
  }
  GPTModel::Activations a1, a2;
  MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 9, MicroBatchInfo{0, 0, true});
  const double train_plain = plain.forward(a1, mb).lm, train_drop = dropped.forward(a2, mb).lm;
  EXPECT_GT(std::abs(train_plain - train_drop), 1e-4 * std::abs(train_plain));
  mb.info.training = false;
  EXPECT_EQ(plain.forward(a1, mb).lm, dropped.forward(a2, mb).lm);
}

// peft: lora through the registry: the adapters are the only trainable weights and their
// share of the buffer is small.
TEST(LoRA, RegistryFreezesTheBaseModel) {
  config::Recipe r = config::parse_recipe_string(
      "model: {arch: llama, num_layers: 2, hidden_size: 64, num_attention_heads: 4, "
      "seq_length: 16, normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "add_bias: false, tie_embeddings: false}\n"
      "training: {micro_batch_size: 1, global_batch_size: 1, train_iters: 1}\n"
      "optimizer: {lr: 1.0e-4}\n"
      "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: 64}}\n"
      "peft: {type: lora, dim: 4, alpha: 8, target_modules: [linear_qkv, linear_fc2]}\n",
      "lora.yaml");
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  const ModelChunks chunks = build_model_chunks(r, 64, store, *tp, 0, 1);
  store.finalize();
  int64_t adapters = 0;
  for (const Parameter* p : store.params()) {
    const bool lora = is_lora_parameter(p->name);
    EXPECT_EQ(p->frozen, !lora) << p->name;
    if (lora) {
      adapters += p->local_shape.numel();
      const bool targeted = p->name.find("attention.qkv") != std::string::npos ||
                            p->name.find("mlp.fc2") != std::string::npos;
      EXPECT_TRUE(targeted) << p->name;
    }
  }
  EXPECT_EQ(store.trainable_numel(), adapters);
  EXPECT_LT(adapters * 20, store.weights().numel());
}

}  // namespace
}  // namespace megatron::models
