// Activation recomputation (TransformerSpec::recompute, training.recompute): selective and full
// give bit-identical losses and gradients to none for GPT (dropout on), LLaMA-style and BERT
// (post-LN, padding mask) models, also with micro-batches interleaved as a pipeline schedule
// does and with pipeline stages sharing one workspace; the trainer's loss curves are identical;
// and the memory saving is real (measured peak of a 4-layer, seq-256 model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "megatron/training/trainer.h"
#include "models/bert/bert_model.h"
#include "models/gpt/gpt_model.h"
#include "tests/support/bert_model_test_util.h"
#include "tests/support/gpt_model_test_util.h"

namespace megatron::models {
namespace {

const char* name(Recompute r) {
  return r == Recompute::None ? "none" : r == Recompute::Selective ? "selective" : "full";
}

GPTSpec gpt_spec(bool llama, int64_t layers = 3) {
  GPTSpec s;
  auto& t = s.transformer;
  t.num_layers = layers;
  t.hidden = 32;
  t.heads = 4;
  t.query_groups = llama ? 2 : 4;
  t.ffn = llama ? 40 : 64;
  t.seq_length = 16;
  t.norm = llama ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.swiglu = llama;
  t.rope = llama;
  t.bias = !llama;
  t.hidden_dropout = llama ? 0.0f : 0.1f;
  t.attention_dropout = llama ? 0.0f : 0.1f;
  t.init_std = 0.1f;
  s.vocab_size = 37;
  s.padded_vocab_size = padded_vocab(37, 8, 1);
  s.max_positions = llama ? 0 : 16;
  s.tie_embeddings = !llama;
  s.embedding_dropout = t.hidden_dropout;
  return s;
}

MicroBatch gpt_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed, int64_t offset) {
  return testing::random_decoder_batch(S, B, vocab, seed, MicroBatchInfo{2, offset, true});
}

// tests/support's BERT batch (uneven padding, token types, MLM and NSP labels) at `offset`.
MicroBatch bert_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed, int64_t offset) {
  MicroBatch mb = testing::random_batch(S, B, seed, vocab);
  mb.info = MicroBatchInfo{2, offset, true};
  return mb;
}

struct Outcome {
  std::vector<double> lm, aux;                 // per micro-batch loss sums
  std::vector<std::vector<float>> token_loss;  // per micro-batch
  std::map<std::string, std::vector<float>> grads;
};

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void expect_same(const Outcome& want, const Outcome& got, const std::string& what) {
  ASSERT_EQ(want.lm.size(), got.lm.size());
  for (size_t m = 0; m < want.lm.size(); ++m) {
    EXPECT_EQ(want.lm[m], got.lm[m]) << what << " micro-batch " << m;
    EXPECT_EQ(want.aux[m], got.aux[m]) << what << " micro-batch " << m;
    EXPECT_EQ(want.token_loss[m], got.token_loss[m]) << what << " micro-batch " << m;
  }
  ASSERT_EQ(want.grads.size(), got.grads.size());
  for (const auto& [param, g] : want.grads) {
    const auto& h = got.grads.at(param);
    ASSERT_EQ(g.size(), h.size()) << param;
    // Bit-identical: the recomputed forward runs the same ops on the same inputs.
    EXPECT_EQ(std::memcmp(g.data(), h.data(), g.size() * sizeof(float)), 0)
        << what << ": gradient of " << param << " differs";
  }
}

// Runs two micro-batches the way a pipeline schedule may: forward 0, forward 1, backward 1,
// backward 0 (both in flight, sharing the recompute workspace), on the model split into
// `stages` pipeline stages (each a Model instance in this process, hidden states handed over).
template <typename MakeModel>
Outcome run(const MakeModel& make, const std::vector<MicroBatch>& batches, int64_t layers,
            int stages, const LossWeights& weights, DType dtype) {
  auto tp = parallel::make_single_process_communicator();
  // One parameter store per stage, as on pipeline ranks (tied tables have a copy per stage).
  std::vector<ParamStore> stores(static_cast<size_t>(stages));
  std::vector<std::unique_ptr<Model>> models;
  const auto workspace = std::make_shared<RecomputeWorkspace>();
  for (int s = 0; s < stages; ++s) {
    ModelStage st;
    st.first_layer = s * layers / stages;
    st.num_layers = (s + 1) * layers / stages - st.first_layer;
    st.pre_process = s == 0;
    st.post_process = s == stages - 1;
    models.push_back(make(stores[static_cast<size_t>(s)], *tp, st, workspace));
  }
  for (ParamStore& store : stores) {
    store.finalize(dtype);
    store.initialize(17);
    // Norm scales and biases start at one / zero: perturb them so every path carries signal.
    for (const ParamSegment& s : store.segments()) {
      std::mt19937 rng(static_cast<uint32_t>(name_hash(s.param->name)));
      std::normal_distribution<float> dist(0.0f, 0.2f);
      if (s.param->init.kind != ParamInit::Kind::Normal)
        for (int64_t i = 0; i < s.size(); ++i) s.master.data<float>()[i] += dist(rng);
    }
    store.refresh_model_weights();
    store.zero_grads();
  }

  const size_t M = batches.size();
  std::vector<std::vector<std::unique_ptr<ModelActivations>>> acts(M);
  std::vector<std::vector<Tensor>> d_in(M);
  Outcome out;
  out.lm.assign(M, 0.0);
  out.aux.assign(M, 0.0);
  out.token_loss.resize(M);
  for (size_t m = 0; m < M; ++m) {
    const Tensor* h = nullptr;
    for (int s = 0; s < stages; ++s) {
      acts[m].push_back(models[s]->make_activations());
      const LossSums l = models[s]->forward(*acts[m][s], batches[m], h);
      h = &models[s]->output(*acts[m][s]);
      EXPECT_EQ(h->dtype(), dtype) << "stage " << s << " output";
      out.lm[m] += l.lm;
      out.aux[m] += l.aux;
    }
    out.token_loss[m] = values(models.back()->token_losses(*acts[m].back()));
  }
  for (size_t m = M; m-- > 0;) {
    d_in[m].resize(stages);
    for (int s = stages; s-- > 0;) {
      const Tensor* d_out = s + 1 < stages ? &d_in[m][s + 1] : nullptr;
      Tensor* d = nullptr;
      if (s > 0) {
        d_in[m][s] = Tensor::empty(models[s]->output(*acts[m][s - 1]).shape(), dtype);
        d = &d_in[m][s];
      }
      models[s]->backward(*acts[m][s], batches[m], weights, {}, d_out, d);
    }
  }
  for (size_t s = 0; s < stores.size(); ++s)
    for (Parameter* p : stores[s].params())
      out.grads[std::to_string(s) + ":" + p->name] = values(p->grad);
  return out;
}

Outcome run_gpt(bool llama, Recompute mode, int stages, bool flash = false,
                DType dtype = DType::F32) {
  GPTSpec spec = gpt_spec(llama);
  spec.transformer.recompute = mode;
  spec.transformer.flash_attention = flash;
  spec.transformer.activation_dtype = dtype;
  std::vector<MicroBatch> batches = {gpt_batch(16, 3, 37, 1, 0), gpt_batch(16, 3, 37, 2, 3)};
  auto make = [&](ParamStore& store, parallel::Communicator& tp, const ModelStage& st,
                  std::shared_ptr<RecomputeWorkspace> ws) -> std::unique_ptr<Model> {
    return std::make_unique<GPTModel>(spec, store, tp, st, ws);
  };
  return run(make, batches, spec.transformer.num_layers, stages, LossWeights{1.0f / 90, 0.0f},
             dtype);
}

Outcome run_bert(Recompute mode, int stages, bool flash = false, DType dtype = DType::F32) {
  BertSpec spec = make_bert_spec(3, 32, 4, 64, 12, 16, 37, 40, true, 0.1f, 0.1f);
  spec.transformer.init_std = 0.1f;
  spec.transformer.norm_eps = 1e-5f;
  spec.transformer.recompute = mode;
  spec.transformer.flash_attention = flash;
  spec.transformer.activation_dtype = dtype;
  std::vector<MicroBatch> batches = {bert_batch(12, 4, 37, 3, 0), bert_batch(12, 4, 37, 4, 4)};
  auto make = [&](ParamStore& store, parallel::Communicator& tp, const ModelStage& st,
                  std::shared_ptr<RecomputeWorkspace> ws) -> std::unique_ptr<Model> {
    return std::make_unique<BertModel>(spec, store, tp, st, ws);
  };
  return run(make, batches, 3, stages, LossWeights{1.0f / 40, 1.0f / 8}, dtype);
}

TEST(Recompute, ParsesTheRecipeValues) {
  EXPECT_EQ(parse_recompute("none"), Recompute::None);
  EXPECT_EQ(parse_recompute("selective"), Recompute::Selective);
  EXPECT_EQ(parse_recompute("full"), Recompute::Full);
  EXPECT_THROW(parse_recompute("partial"), InputError);
}

TEST(Recompute, GptWithDropoutGradientsEqualNone) {
  for (int stages : {1, 2}) {
    const Outcome none = run_gpt(false, Recompute::None, stages);
    for (Recompute mode : {Recompute::Selective, Recompute::Full})
      expect_same(none, run_gpt(false, mode, stages),
                  std::string("gpt ") + name(mode) + " stages " + std::to_string(stages));
  }
}

TEST(Recompute, LlamaGradientsEqualNone) {
  for (int stages : {1, 3}) {
    const Outcome none = run_gpt(true, Recompute::None, stages);
    for (Recompute mode : {Recompute::Selective, Recompute::Full})
      expect_same(none, run_gpt(true, mode, stages),
                  std::string("llama ") + name(mode) + " stages " + std::to_string(stages));
  }
}

TEST(Recompute, BertGradientsEqualNone) {
  for (int stages : {1, 2}) {
    const Outcome none = run_bert(Recompute::None, stages);
    for (Recompute mode : {Recompute::Selective, Recompute::Full})
      expect_same(none, run_bert(mode, stages),
                  std::string("bert ") + name(mode) + " stages " + std::to_string(stages));
  }
}

// bf16 weights and activations: the recomputed forward rounds exactly as the first one did.
TEST(Recompute, Bf16GradientsEqualNone) {
  for (int stages : {1, 2}) {
    const std::string where = " stages " + std::to_string(stages);
    const Outcome llama = run_gpt(true, Recompute::None, stages, false, DType::BF16);
    const Outcome bert = run_bert(Recompute::None, stages, false, DType::BF16);
    for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
      expect_same(llama, run_gpt(true, mode, stages, false, DType::BF16),
                  std::string("llama bf16 ") + name(mode) + where);
      expect_same(bert, run_bert(mode, stages, false, DType::BF16),
                  std::string("bert bf16 ") + name(mode) + where);
    }
  }
}

// ---- flash attention (TransformerSpec::flash_attention) ---------------------------------------

// Flash vs unfused: the same computation up to rounding (dropout masks identical).
void expect_close(const Outcome& want, const Outcome& got, const std::string& what) {
  ASSERT_EQ(want.lm.size(), got.lm.size());
  for (size_t m = 0; m < want.lm.size(); ++m) {
    EXPECT_NEAR(want.lm[m], got.lm[m], 1e-5 * std::abs(want.lm[m])) << what << " mb " << m;
    EXPECT_NEAR(want.aux[m], got.aux[m], 1e-5 * std::abs(want.aux[m]) + 1e-7) << what;
  }
  ASSERT_EQ(want.grads.size(), got.grads.size());
  for (const auto& [param, g] : want.grads) {
    const auto& h = got.grads.at(param);
    ASSERT_EQ(g.size(), h.size()) << param;
    double scale = 1e-12, err = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      scale = std::max(scale, std::abs(double(g[i])));
      err = std::max(err, std::abs(double(g[i]) - h[i]));
    }
    EXPECT_LE(err, 2e-4 * scale) << what << ": gradient of " << param;
  }
}

TEST(FlashAttentionModels, GptWithDropoutGradientsEqualUnfused) {
  for (int stages : {1, 2})
    expect_close(run_gpt(false, Recompute::None, stages),
                 run_gpt(false, Recompute::None, stages, true),
                 "gpt flash stages " + std::to_string(stages));
}

TEST(FlashAttentionModels, LlamaGradientsEqualUnfused) {
  expect_close(run_gpt(true, Recompute::None, 1), run_gpt(true, Recompute::None, 1, true),
               "llama flash");
}

TEST(FlashAttentionModels, BertGradientsEqualUnfused) {
  for (int stages : {1, 2})
    expect_close(run_bert(Recompute::None, stages), run_bert(Recompute::None, stages, true),
                 "bert flash stages " + std::to_string(stages));
}

// Under flash, selective has nothing to drop (behaves like none) and full recomputes the layer:
// both bit-identical to none.
TEST(FlashAttentionModels, RecomputeModesEqualNone) {
  const Outcome gpt = run_gpt(false, Recompute::None, 2, true);
  const Outcome bert = run_bert(Recompute::None, 1, true);
  for (Recompute mode : {Recompute::Selective, Recompute::Full}) {
    expect_same(gpt, run_gpt(false, mode, 2, true), std::string("gpt flash ") + name(mode));
    expect_same(bert, run_bert(mode, 1, true), std::string("bert flash ") + name(mode));
  }
}

// ---- memory: the saving is real -----------------------------------------------------------

// Peak bytes of one forward + backward of a 4-layer GPT at seq 256 (hidden 128, 8 heads, micro
// 4), above what was held before (the model and its parameters included).
struct Peak {
  bool measured;
  int64_t bytes;
};
Peak peak_of(Recompute mode) {
  const MemoryStats before = cpu_memory_stats();
  {
    GPTSpec s;
    auto& t = s.transformer;
    t.num_layers = 4;
    t.hidden = 128;
    t.heads = 8;
    t.query_groups = 8;
    t.ffn = 512;
    t.seq_length = 256;
    t.hidden_dropout = 0.1f;
    t.attention_dropout = 0.1f;
    t.recompute = mode;
    s.vocab_size = 500;
    s.padded_vocab_size = 512;
    s.max_positions = 256;
    auto tp = parallel::make_single_process_communicator();
    ParamStore store;
    GPTModel model(s, store, *tp);
    store.finalize();
    store.initialize(3);
    GPTModel::Activations act;
    const MicroBatch mb = gpt_batch(256, 4, 500, 9, 0);
    for (int step = 0; step < 2; ++step) {  // steady state: buffers reused
      model.forward(act, mb);
      model.backward(act, mb, LossWeights{1e-3f, 0.0f});
    }
  }
  const MemoryStats after = cpu_memory_stats();
  // The counter is a process-wide high-water mark: a run peaking below an earlier one is hidden.
  if (after.peak_bytes == before.peak_bytes) return {false, 0};
  return {true, after.peak_bytes - before.current_bytes};
}

TEST(RecomputeMemory, FullAndSelectiveLowerThePeak) {
  if (cpu_memory_stats().peak_bytes > cpu_memory_stats().current_bytes + (int64_t{1} << 20))
    GTEST_SKIP() << "an earlier test in this process set a peak; run this case alone";
  // Expected order full < selective < none: measured in that order, each must raise the peak.
  const Peak full = peak_of(Recompute::Full);
  const Peak selective = peak_of(Recompute::Selective);
  const Peak none = peak_of(Recompute::None);
  ASSERT_TRUE(full.measured);
  ASSERT_TRUE(selective.measured) << "selective peaked no higher than full";
  ASSERT_TRUE(none.measured) << "none peaked no higher than selective";
  const double MiB = 1048576.0;
  const double probs = 4.0 * 4 * 8 * 256 * 256;  // [B, H, S, S] fp32 per layer
  std::cout << "[memory] 4-layer GPT, seq 256, micro 4: peak none " << none.bytes / MiB
            << " MiB, selective " << selective.bytes / MiB << " MiB, full " << full.bytes / MiB
            << " MiB (probabilities " << probs / MiB << " MiB per layer)\n";
  // Selective keeps one probabilities buffer instead of one per layer.
  EXPECT_NEAR(static_cast<double>(none.bytes - selective.bytes), 3 * probs, 0.05 * probs);
  // Full keeps one layer's context plus a [S, B, D] checkpoint per layer.
  EXPECT_LT(static_cast<double>(full.bytes), 0.5 * static_cast<double>(none.bytes));
}

}  // namespace
}  // namespace megatron::models

// ---- the trainer ------------------------------------------------------------------------------

namespace megatron {
namespace {

class CountingSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 16; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= 16; ++t) tokens[t] = static_cast<int32_t>((index * 5 + t * 3) % 23);
  }
};

// BERT-shaped micro-batches: masked tokens, two segments, padding, sentence-pair labels.
class BertSource final : public training::BatchSource {
 public:
  int64_t seq_length() const override { return 16; }
  int64_t samples_per_epoch() const override { return 1000; }
  void fill(int64_t first, int64_t B, models::MicroBatch& mb) const override {
    const int64_t S = 16;
    mb.tokens = Tensor::empty({S, B}, DType::I32);
    mb.labels = Tensor::empty({S, B}, DType::I32);
    mb.token_types = Tensor::empty({S, B}, DType::I32);
    mb.padding_mask = Tensor::empty({B, S}, DType::U8);
    mb.nsp_labels = Tensor::empty({B}, DType::I32);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t sample = first + b, len = S - sample % 4;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = s * B + b;
        const int32_t token = static_cast<int32_t>((sample * 7 + s * 3) % 23);
        const bool masked = s < len && (s + sample) % 3 == 0;
        mb.tokens.data<int32_t>()[i] = masked ? 22 : token;
        mb.labels.data<int32_t>()[i] = masked ? token : models::kIgnoreIndex;
        mb.token_types.data<int32_t>()[i] = s >= len / 2 ? 1 : 0;
        mb.padding_mask.data<uint8_t>()[b * S + s] = s < len ? 1 : 0;
      }
      mb.nsp_labels.data<int32_t>()[b] = static_cast<int32_t>(sample % 2);
    }
  }
};

config::Recipe recipe(const std::string& arch, const std::string& recompute) {
  std::ostringstream y;
  y << "model: {arch: " << arch
    << ", num_layers: 3, hidden_size: 32, num_attention_heads: 4, seq_length: 16,"
       " make_vocab_size_divisible_by: 8";
  if (arch == "llama")
    y << ", num_query_groups: 2, ffn_hidden_size: 48, normalization: rmsnorm, activation: swiglu,"
         " position_embedding: rope, tie_embeddings: false, add_bias: false";
  else
    y << ", hidden_dropout: 0.1, attention_dropout: 0.1";
  if (arch == "bert") y << ", max_position_embeddings: 16";
  y << "}\ntraining: {micro_batch_size: 2, global_batch_size: 4, train_iters: 4, eval_interval: 2,"
       " eval_iters: 1, seed: 7, peak_tflops: 1.0, recompute: "
    << recompute
    << "}\n"
       "optimizer: {lr: 0.01, schedule: {warmup_iters: 1}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 100}\n";
  return config::parse_recipe_string(y.str(), "recompute.yaml");
}

training::TrainSummary train(const std::string& arch, const std::string& recompute) {
  std::shared_ptr<const training::BatchSource> src;
  if (arch == "bert")
    src = std::make_shared<BertSource>();
  else
    src = std::make_shared<CountingSource>();
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(recipe(arch, recompute), 23, src, src, *world, log);
  return t.run();
}

TEST(RecomputeTrainer, LossCurvesEqualNone) {
  for (const std::string arch : {"gpt", "llama", "bert"}) {
    const auto none = train(arch, "none");
    ASSERT_EQ(none.steps.size(), 4u);
    for (const std::string mode : {"selective", "full"}) {
      const auto got = train(arch, mode);
      ASSERT_EQ(got.steps.size(), none.steps.size());
      for (size_t i = 0; i < none.steps.size(); ++i) {
        EXPECT_EQ(got.steps[i].loss, none.steps[i].loss) << arch << " " << mode << " step " << i;
        EXPECT_EQ(got.steps[i].grad_norm, none.steps[i].grad_norm)
            << arch << " " << mode << " step " << i;
      }
      ASSERT_EQ(got.evals.size(), none.evals.size());
      for (size_t i = 0; i < none.evals.size(); ++i)
        EXPECT_EQ(got.evals[i].loss, none.evals[i].loss) << arch << " " << mode << " eval " << i;
    }
  }
}

}  // namespace
}  // namespace megatron
