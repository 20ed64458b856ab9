// BERT: a plain-loop forward of a 1-layer BERT, padding and initial losses, pipeline-stage and
// micro-batch splits against the whole model, grads_ready watermarks, and bad input.
// Finite-difference gradient checks: test_bert_gradients.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/bert/bert_model.h"
#include "tests/support/bert_model_test_util.h"

namespace megatron::models {
namespace {

using testing::perturb_biases;
using testing::random_batch;
using testing::tiny_spec;

// A 1-layer BERT forward in double-precision loops, straight from the equations.
struct Reference {
  const ParamStore& store;
  const BertSpec& spec;
  const float* p(const std::string& name) const {
    return const_cast<ParamStore&>(store).get(name).weight.data<float>();
  }
  using Vec = std::vector<double>;
  Vec layernorm(const Vec& x, const std::string& name) const {
    const float *g = p(name + ".weight"), *b = p(name + ".bias");
    double mean = 0, var = 0;
    for (double v : x) mean += v / x.size();
    for (double v : x) var += (v - mean) * (v - mean) / x.size();
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = (x[i] - mean) / std::sqrt(var + spec.transformer.norm_eps) * g[i] + b[i];
    return y;
  }
  Vec linear(const Vec& x, const std::string& name, size_t out) const {
    const float *w = p(name + ".weight"), *b = p(name + ".bias");
    Vec y(out);
    for (size_t o = 0; o < out; ++o) {
      y[o] = b[o];
      for (size_t i = 0; i < x.size(); ++i) y[o] += w[o * x.size() + i] * x[i];
    }
    return y;
  }
  static double gelu(double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
  }
  static double cross_entropy(const Vec& logits, int label) {
    double m = logits[0], s = 0;
    for (double v : logits) m = std::max(m, v);
    for (double v : logits) s += std::exp(v - m);
    return std::log(s) + m - logits[label];
  }

  LossSums run(const MicroBatch& mb) const {
    const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = spec.transformer.hidden;
    const int64_t H = spec.transformer.heads, Dh = D / H, F = spec.transformer.ffn;
    auto at = [&](const Tensor& t, int64_t s, int64_t b) { return t.data<int32_t>()[s * B + b]; };
    std::vector<Vec> x(S * B);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t b = 0; b < B; ++b) {
        Vec e(D);
        for (int64_t d = 0; d < D; ++d)
          e[d] = p("embedding.word_embeddings.weight")[at(mb.tokens, s, b) * D + d] +
                 p("embedding.position_embeddings.weight")[s * D + d] +
                 p("embedding.tokentype_embeddings.weight")[at(mb.token_types, s, b) * D + d];
        x[s * B + b] = layernorm(e, "embedding.norm");
      }
    // Attention: fused QKV rows per head h are [q_h; k_h; v_h] (query groups == heads).
    std::vector<Vec> qkv(S * B), attn(S * B, Vec(D));
    for (int64_t i = 0; i < S * B; ++i) qkv[i] = linear(x[i], "layers.0.attention.qkv", 3 * D);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i) {
          Vec w(S, 0.0);
          double m = -1e300, z = 0;
          for (int64_t j = 0; j < S; ++j) {
            if (!mb.padding_mask.data<uint8_t>()[b * S + j]) continue;
            for (int64_t e = 0; e < Dh; ++e)
              w[j] += qkv[i * B + b][(h * 3) * Dh + e] * qkv[j * B + b][(h * 3 + 1) * Dh + e];
            w[j] /= std::sqrt(static_cast<double>(Dh));
            m = std::max(m, w[j]);
          }
          for (int64_t j = 0; j < S; ++j)
            if (mb.padding_mask.data<uint8_t>()[b * S + j]) z += (w[j] = std::exp(w[j] - m));
          for (int64_t j = 0; j < S; ++j)
            if (mb.padding_mask.data<uint8_t>()[b * S + j])
              for (int64_t e = 0; e < Dh; ++e)
                attn[i * B + b][h * Dh + e] += w[j] / z * qkv[j * B + b][(h * 3 + 2) * Dh + e];
        }
    LossSums l;
    for (int64_t i = 0; i < S * B; ++i) {
      Vec mid = linear(attn[i], "layers.0.attention.proj", D);
      for (int64_t d = 0; d < D; ++d) mid[d] += x[i][d];
      const Vec h1 = layernorm(mid, "layers.0.input_norm");
      Vec f = linear(h1, "layers.0.mlp.fc1", F);
      for (double& v : f) v = gelu(v);
      Vec sum2 = linear(f, "layers.0.mlp.fc2", D);
      for (int64_t d = 0; d < D; ++d) sum2[d] += h1[d];
      x[i] = layernorm(sum2, "layers.0.post_attention_norm");  // the encoder output
      const int label = mb.labels.data<int32_t>()[i];
      if (label == kIgnoreIndex) continue;
      Vec t = linear(x[i], "lm_head.dense", D);
      for (double& v : t) v = gelu(v);
      t = layernorm(t, "lm_head.norm");
      Vec logits(spec.vocab_size);  // padding columns of the vocabulary are never predicted
      for (int64_t v = 0; v < spec.vocab_size; ++v) {
        logits[v] = p("lm_head.bias")[v];
        for (int64_t d = 0; d < D; ++d)
          logits[v] += t[d] * p("embedding.word_embeddings.weight")[v * D + d];
      }
      l.lm += cross_entropy(logits, label);
    }
    for (int64_t b = 0; b < B; ++b) {
      Vec pooled = linear(x[b], "pooler.dense", D);  // position 0 of sample b
      for (double& v : pooled) v = std::tanh(v);
      l.aux += cross_entropy(linear(pooled, "binary_head", 2), mb.nsp_labels.data<int32_t>()[b]);
    }
    return l;
  }
};

TEST(BertModel, MatchesPlainLoopReference) {
  BertSpec spec = tiny_spec();
  spec.transformer.num_layers = 1;
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(spec, store, *tp);
  store.finalize();
  store.initialize(41);
  perturb_biases(store, 42);
  const MicroBatch mb = random_batch(8, 3, 43);
  auto act = model.make_activations();
  const LossSums got = model.forward(*act, mb);
  const LossSums want = Reference{store, spec}.run(mb);
  EXPECT_NEAR(got.lm, want.lm, 1e-4 * std::abs(want.lm));
  EXPECT_NEAR(got.aux, want.aux, 1e-4 * std::abs(want.aux));
  EXPECT_GT(want.aux, 0.1);
}

TEST(BertModel, PaddedTokensDoNotChangeTheLosses) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(tiny_spec(0.1f), store, *tp);
  store.finalize();
  store.initialize(51);
  MicroBatch mb = random_batch(8, 3, 52);
  auto act = model.make_activations();
  const LossSums before = model.forward(*act, mb);
  for (int64_t s = 6; s < 8; ++s) {  // sample 1's padding
    mb.tokens.data<int32_t>()[s * 3 + 1] = 7;
    mb.token_types.data<int32_t>()[s * 3 + 1] = 1;
  }
  const LossSums after = model.forward(*act, mb);
  EXPECT_EQ(before.lm, after.lm);
  EXPECT_EQ(before.aux, after.aux);
}

TEST(BertModel, InitialLossesAreNearUniform) {
  BertSpec spec = tiny_spec();
  spec.transformer.init_std = 0.002f;
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(spec, store, *tp);
  store.finalize();
  store.initialize(1);
  const MicroBatch mb = random_batch(8, 3, 9);
  auto act = model.make_activations();
  const LossSums l = model.forward(*act, mb);
  EXPECT_NEAR(l.lm / static_cast<double>(count_lm_targets(mb)), std::log(29.0), 0.02);
  EXPECT_NEAR(l.aux / 3.0, std::log(2.0), 0.02);
  EXPECT_TRUE(model.has_aux_loss());
  EXPECT_EQ(model.token_losses(*act).numel(), 8 * 3);
}

// Every gradient of the stores, by name; the word-embedding copies of several stages summed.
std::map<std::string, std::vector<float>> grads_by_name(const std::vector<ParamStore*>& stores) {
  std::map<std::string, std::vector<float>> out;
  for (ParamStore* s : stores)
    for (Parameter* p : s->params()) {
      auto& g = out[p->name];
      g.resize(p->grad.numel(), 0.0f);
      for (int64_t i = 0; i < p->grad.numel(); ++i) g[i] += p->grad.data<float>()[i];
    }
  return out;
}

void expect_same_grads(const std::map<std::string, std::vector<float>>& got,
                       const std::map<std::string, std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, w] : want) {
    const auto& g = got.at(name);
    ASSERT_EQ(g.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 1e-5f + 1e-4f * std::abs(w[i])) << name << "[" << i << "]";
  }
}

TEST(BertModel, PipelineStagesMatchWholeModel) {
  const BertSpec spec = tiny_spec(0.1f);
  const LossWeights weights{0.25f, 0.5f};
  const MicroBatch mb = random_batch(8, 3, 61);
  auto tp = parallel::make_single_process_communicator();

  ParamStore whole_store;
  BertModel whole(spec, whole_store, *tp);
  whole_store.finalize();
  whole_store.initialize(62);
  whole_store.zero_grads();
  auto act = whole.make_activations();
  const LossSums want = whole.forward(*act, mb);
  whole.backward(*act, mb, weights);

  ParamStore first_store, last_store;
  BertModel first(spec, first_store, *tp, ModelStage{0, 1, true, false});
  BertModel last(spec, last_store, *tp, ModelStage{1, 1, false, true});
  for (ParamStore* s : {&first_store, &last_store}) {
    s->finalize();
    s->initialize(62);
    s->zero_grads();
  }
  EXPECT_NE(first.word_embeddings(), nullptr);
  EXPECT_NE(last.word_embeddings(), nullptr);
  auto a1 = first.make_activations(), a2 = last.make_activations();
  EXPECT_EQ(first.forward(*a1, mb).lm, 0.0);
  const Tensor boundary = first.output(*a1).clone();  // as received over p2p
  const LossSums got = last.forward(*a2, mb, &boundary);
  EXPECT_NEAR(got.lm, want.lm, 1e-6 * want.lm);
  EXPECT_NEAR(got.aux, want.aux, 1e-6 * want.aux);
  Tensor d_boundary = Tensor::empty(boundary.shape(), DType::F32);
  last.backward(*a2, mb, weights, {}, nullptr, &d_boundary);
  first.backward(*a1, mb, weights, {}, &d_boundary);
  expect_same_grads(grads_by_name({&first_store, &last_store}), grads_by_name({&whole_store}));
}

// Rows [b0, b0 + nb) of the batch as their own micro-batch at global offset info.batch_offset+b0.
MicroBatch sub_batch(const MicroBatch& mb, int64_t b0, int64_t nb) {
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1);
  MicroBatch out;
  out.info = mb.info;
  out.info.batch_offset += b0;
  auto columns = [&](const Tensor& t) {
    Tensor c = Tensor::empty({S, nb}, DType::I32);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t b = 0; b < nb; ++b)
        c.data<int32_t>()[s * nb + b] = t.data<int32_t>()[s * B + b0 + b];
    return c;
  };
  out.tokens = columns(mb.tokens);
  out.labels = columns(mb.labels);
  out.token_types = columns(mb.token_types);
  out.padding_mask = mb.padding_mask.slice(b0, b0 + nb).clone();
  out.nsp_labels = mb.nsp_labels.slice(b0, b0 + nb).clone();
  return out;
}

// Data parallelism and micro-batching split the batch: the same sums and gradients (dropout
// masks follow the global sample index).
TEST(BertModel, MicroBatchSplitMatchesWholeBatch) {
  const BertSpec spec = tiny_spec(0.1f);
  const LossWeights weights{0.25f, 0.5f};
  const MicroBatch mb = random_batch(8, 4, 71);
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(spec, store, *tp);
  store.finalize();
  store.initialize(72);
  auto act = model.make_activations();
  store.zero_grads();
  const LossSums want = model.forward(*act, mb);
  model.backward(*act, mb, weights);
  const auto want_grads = grads_by_name({&store});

  store.zero_grads();
  LossSums got;
  for (int64_t b0 : {0, 2}) {
    const MicroBatch part = sub_batch(mb, b0, 2);
    got += model.forward(*act, part);
    model.backward(*act, part, weights);
  }
  EXPECT_NEAR(got.lm, want.lm, 1e-5 * want.lm);
  EXPECT_NEAR(got.aux, want.aux, 1e-5 * want.aux);
  expect_same_grads(grads_by_name({&store}), want_grads);
}

// grads_ready watermarks grow, and every gradient below one is final when it is reported.
TEST(BertModel, GradsReadyWatermarksAreFinal) {
  auto tp = parallel::make_single_process_communicator();
  ParamStore store;
  BertModel model(tiny_spec(), store, *tp);
  store.finalize();
  store.initialize(81);
  const MicroBatch mb = random_batch(8, 3, 82);
  auto act = model.make_activations();
  store.zero_grads();
  model.forward(*act, mb);
  std::vector<std::pair<int64_t, Tensor>> reports;
  model.backward(*act, mb, LossWeights{0.5f, 0.5f}, [&](int64_t w) {
    reports.emplace_back(std::min(w, store.grads().numel()), store.grads().clone());
  });
  ASSERT_GE(reports.size(), 3u);  // heads, 2 blocks, embeddings
  EXPECT_EQ(reports.back().first, store.grads().numel());
  for (size_t k = 0; k < reports.size(); ++k) {
    if (k > 0) {
      EXPECT_GE(reports[k].first, reports[k - 1].first);
    }
    for (int64_t i = 0; i < reports[k].first; ++i)
      ASSERT_EQ(reports[k].second.data<float>()[i], store.grads().data<float>()[i])
          << "report " << k << " offset " << i;
  }
}

TEST(BertModel, RejectsBadInput) {
  auto tp = parallel::make_single_process_communicator();
  BertSpec causal = tiny_spec();
  causal.transformer.causal = true;
  ParamStore store0;
  EXPECT_ANY_THROW(BertModel(causal, store0, *tp));

  ParamStore store;
  BertModel model(tiny_spec(), store, *tp);
  store.finalize();
  store.initialize(1);
  auto act = model.make_activations();
  MicroBatch bad_types = random_batch(8, 3, 1);
  bad_types.token_types.data<int32_t>()[0] = 2;
  EXPECT_ANY_THROW(model.forward(*act, bad_types));
  MicroBatch bad_mask = random_batch(8, 3, 1);
  bad_mask.padding_mask = Tensor::empty({8, 3}, DType::U8);  // [S, B] instead of [B, S]
  EXPECT_ANY_THROW(model.forward(*act, bad_mask));
  MicroBatch no_nsp = random_batch(8, 3, 1);
  no_nsp.nsp_labels = Tensor();
  EXPECT_ANY_THROW(model.forward(*act, no_nsp));
}

}  // namespace
}  // namespace megatron::models
