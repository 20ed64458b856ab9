// Frozen parameters (Parameter::frozen, LoRA's base model): laid out after every trainable one,
// no gradient, fp32 master or optimizer memory, and the trainable parameters' gradients are
// exactly those of the same model with nothing frozen (the input gradients still flow through
// frozen layers, embeddings, norms and the tied head).
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "megatron/optimizer/optimizer.h"
#include "models/gpt/gpt_model.h"
#include "tests/support/gpt_model_test_util.h"

namespace megatron::models {
namespace {

GPTSpec spec(bool rope) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = 2;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 2;
  t.ffn = 24;
  t.seq_length = 6;
  t.rope = rope;
  t.swiglu = rope;
  t.norm = rope ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.init_std = 0.2f;
  s.vocab_size = 29;
  s.padded_vocab_size = padded_vocab(29, 8, 1);
  s.max_positions = rope ? 0 : 8;
  s.tie_embeddings = !rope;
  return s;
}

// Only the second layer's attention and MLP weights train.
bool trains(const std::string& name) {
  return name.rfind("layers.1.attention", 0) == 0 || name.rfind("layers.1.mlp", 0) == 0;
}

struct Grads {
  std::map<std::string, std::vector<float>> grads;
  int64_t grad_numel = 0, weight_numel = 0;
};

Grads run(bool rope, bool freeze, DType dtype = DType::F32) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  GPTModel model(spec(rope), store, *tp);
  if (freeze)
    for (Parameter* p : store.params()) p->frozen = !trains(p->name);
  store.finalize(dtype);
  store.initialize(42);
  store.zero_grads();
  const MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 7, MicroBatchInfo{0, 0, true});
  GPTModel::Activations act;
  model.forward(act, mb);
  model.backward(act, mb, LossWeights{0.1f, 0.0f});
  Grads r;
  r.grad_numel = store.grads().numel();
  r.weight_numel = store.weights().numel();
  for (Parameter* p : store.params()) {
    if (p->frozen) {
      EXPECT_FALSE(present(p->grad)) << p->name;
      EXPECT_GE(p->offset, store.trainable_numel()) << p->name;
      continue;
    }
    EXPECT_LT(p->offset, store.trainable_numel()) << p->name;
    r.grads[p->name].assign(p->grad.data<float>(), p->grad.data<float>() + p->grad.numel());
  }
  return r;
}

TEST(FrozenParams, TrainableGradientsUnchangedAndNoGradientMemory) {
  for (bool rope : {false, true}) {
    SCOPED_TRACE(rope ? "llama-like" : "gpt-like (tied head, learned positions)");
    const Grads all = run(rope, false), part = run(rope, true);
    EXPECT_EQ(part.weight_numel, all.weight_numel);
    EXPECT_LT(part.grad_numel, all.grad_numel / 2);
    ASSERT_FALSE(part.grads.empty());
    for (const auto& [name, g] : part.grads) {
      ASSERT_TRUE(trains(name)) << name;
      EXPECT_EQ(g, all.grads.at(name)) << name;
    }
  }
}

// The optimizer owns only the trainable region: its state covers the trainable parameters, and
// a step leaves every frozen weight bit for bit as it was (mixed precision too).
TEST(FrozenParams, OptimizerStateAndStepSkipFrozenWeights) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    auto tp = parallel::make_single_process_communicator();
    ParamStore store;
    GPTSpec sp = spec(true);
    sp.transformer.activation_dtype = dtype;
    GPTModel model(sp, store, *tp);
    for (Parameter* p : store.params()) p->frozen = !trains(p->name);
    store.finalize(dtype);
    store.initialize(42);
    auto snapshot = [&] {
      std::vector<uint8_t> v;  // the frozen weights' bytes
      for (Parameter* p : store.params()) {
        if (!p->frozen) continue;
        const Tensor w = p->weight.to(Device::CPU);
        const auto* bytes = static_cast<const uint8_t*>(w.raw());
        v.insert(v.end(), bytes, bytes + w.nbytes());
      }
      return v;
    };
    const auto frozen_before = snapshot();
    int64_t trainable = 0;
    for (Parameter* p : store.params())
      if (!p->frozen) trainable += p->local_shape.numel();
    optim::Optimizer opt(store, optim::OptimizerSettings{});
    int64_t state = 0;
    for (const optim::Segment& s : opt.segments()) {
      EXPECT_FALSE(s.param->frozen) << s.param->name;
      state += s.end - s.begin;
    }
    EXPECT_EQ(state, trainable);
    store.zero_grads();
    const MicroBatch mb = testing::random_decoder_batch(6, 3, 29, 7, MicroBatchInfo{0, 0, true});
    GPTModel::Activations act;
    model.forward(act, mb);
    model.backward(act, mb, LossWeights{0.1f, 0.0f});
    opt.step(0.1);
    EXPECT_EQ(snapshot(), frozen_before);
  }
}

}  // namespace
}  // namespace megatron::models
