// The transformer block reaches attention and MLP only through their interfaces: a block built
// from other factories runs them in the dense ones' place (as a mixture-of-experts MLP or
// LoRA-wrapped projections will), and a wrapper around the dense MLP changes nothing.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/transformer/block.h"
#include "megatron/transformer/mlp.h"
#include "tests/support/random_tensor.h"

namespace megatron {
namespace {

TransformerSpec tiny_spec(bool post_norm) {
  TransformerSpec t;
  t.num_layers = 1;
  t.hidden = 16;
  t.heads = 4;
  t.query_groups = 4;
  t.ffn = 24;
  t.seq_length = 5;
  t.post_norm = post_norm;
  t.causal = !post_norm;
  t.init_std = 0.2f;
  return t;
}

using megatron::testing::random_tensor;

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// An MLP with no parameters whose branch is zero: the block's output is then x + attention.
class ZeroMLP final : public MlpLayer {
 public:
  struct State final : LayerState {
    Tensor out;
  };
  mutable int forwards = 0, backwards = 0;
  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<State>(); }
  Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo&) const override {
    ++forwards;
    auto& s = static_cast<State&>(state);
    s.out = Tensor::zeros(in.shape(), in.dtype());
    return s.out;
  }
  void backward(LayerState&, const Tensor&, Tensor& d_in, const MicroBatchInfo&) const override {
    ++backwards;
    d_in.zero_();
  }
  void collect_params(std::vector<Parameter*>&) const override {}
};

// The way LoRA wraps a layer: the dense MLP inside, its calls forwarded, its parameters its own.
class WrappedMLP final : public MlpLayer {
 public:
  explicit WrappedMLP(const SubmoduleArgs& args) : inner_(args) {}
  std::unique_ptr<LayerState> make_state() const override { return inner_.make_state(); }
  Tensor& forward(LayerState& s, const Tensor& in, const MicroBatchInfo& mb) const override {
    return inner_.forward(s, in, mb);
  }
  void backward(LayerState& s, const Tensor& d_out, Tensor& d_in,
                const MicroBatchInfo& mb) const override {
    inner_.backward(s, d_out, d_in, mb);
  }
  void collect_params(std::vector<Parameter*>& out) const override { inner_.collect_params(out); }

 private:
  DenseMLP inner_;
};

class BlockSubmodulesTest : public ::testing::TestWithParam<bool> {};

TEST_P(BlockSubmodulesTest, AnotherMlpRunsInTheDenseOnesPlace) {
  const bool post_norm = GetParam();
  auto tp = parallel::make_single_process_communicator();
  const TransformerSpec spec = tiny_spec(post_norm);
  ZeroMLP* zero = nullptr;
  BlockSubmodules subs = dense_submodules();
  subs.mlp = [&zero](const SubmoduleArgs&) {
    auto m = std::make_unique<ZeroMLP>();
    zero = m.get();
    return m;
  };
  ParamStore store;
  TransformerBlock block(store, "layers.0", 0, spec, *tp, nullptr, subs);
  store.finalize();
  store.initialize(7);
  ASSERT_NE(zero, nullptr);
  // Only the norms and the attention registered parameters: the dense MLP was never built.
  std::vector<std::string> names;
  for (const Parameter* p : store.params()) names.push_back(p->name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "layers.0.input_norm.weight", "layers.0.input_norm.bias",
                "layers.0.attention.qkv.weight", "layers.0.attention.qkv.bias",
                "layers.0.attention.proj.weight", "layers.0.attention.proj.bias",
                "layers.0.post_attention_norm.weight", "layers.0.post_attention_norm.bias"}));

  const Tensor x = random_tensor({spec.seq_length, 2, spec.hidden}, 3);
  TransformerBlock::Ctx ctx;
  MicroBatchInfo mb;
  const Tensor& out = block.forward(ctx, x, mb);
  EXPECT_EQ(zero->forwards, 1);
  // Pre-LN: out = mid + 0 = mid. Post-LN: out = LN2(LN1(mid) + 0), LN2 of a normalised row
  // with unit weights and zero bias is that row again to rounding.
  const std::vector<float> got = values(out);
  const std::vector<float> want = values(post_norm ? ctx.ln1_out : ctx.mid);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f) << i;

  Tensor dx = Tensor::empty(x.shape(), DType::F32);
  block.backward(ctx, random_tensor(x.shape(), 4), dx, mb);
  EXPECT_EQ(zero->backwards, 1);
}

TEST_P(BlockSubmodulesTest, WrappingTheDenseMlpChangesNothing) {
  const bool post_norm = GetParam();
  auto tp = parallel::make_single_process_communicator();
  const TransformerSpec spec = tiny_spec(post_norm);
  BlockSubmodules wrapped = dense_submodules();
  wrapped.mlp = [](const SubmoduleArgs& a) { return std::make_unique<WrappedMLP>(a); };

  struct Run {
    std::vector<float> out, dx, grads;
  };
  auto run = [&](const BlockSubmodules& subs) {
    ParamStore store;
    TransformerBlock block(store, "layers.0", 0, spec, *tp, nullptr, subs);
    store.finalize();
    store.initialize(11);
    const Tensor x = random_tensor({spec.seq_length, 3, spec.hidden}, 5);
    TransformerBlock::Ctx ctx;
    MicroBatchInfo mb;
    Run r;
    r.out = values(block.forward(ctx, x, mb));
    Tensor dx = Tensor::empty(x.shape(), DType::F32);
    block.backward(ctx, random_tensor(x.shape(), 6), dx, mb);
    r.dx = values(dx);
    for (const auto& p : store.params()) {
      const std::vector<float> g = values(p->grad);
      r.grads.insert(r.grads.end(), g.begin(), g.end());
    }
    return r;
  };
  const Run plain = run(dense_submodules()), other = run(wrapped);
  EXPECT_EQ(plain.out, other.out);
  EXPECT_EQ(plain.dx, other.dx);
  EXPECT_EQ(plain.grads, other.grads);
  EXPECT_FALSE(plain.grads.empty());
}

TEST(BlockSubmodules, MissingFactoryIsRefused) {
  auto tp = parallel::make_single_process_communicator();
  BlockSubmodules subs = dense_submodules();
  subs.mlp = nullptr;
  ParamStore store;
  EXPECT_THROW(TransformerBlock(store, "layers.0", 0, tiny_spec(false), *tp, nullptr, subs), Error);
}

INSTANTIATE_TEST_SUITE_P(PreAndPostNorm, BlockSubmodulesTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "PostLN" : "PreLN"; });

}  // namespace
}  // namespace megatron
