// The planner (megatron/planning/planner.h): its memory prediction against the measured peak of
// real CPU training steps, parameter counts against the real model (whole and tp/pp shards),
// FLOPs against the trainer, a hand-checked breakdown, the pipeline in-flight count against the
// schedules, the layout search, shipped recipes on their documented clusters, and the CLI.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

#include "data/tokenizer.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/planning/planner.h"
#include "megatron/training/trainer.h"
#include "models/bert/bert_model.h"

namespace megatron {
namespace {

using planning::ClusterSpec;
using planning::Layout;
using planning::PlanReport;
using ::testing::HasSubstr;

// A learnable synthetic corpus (as in test_training.cpp) over `vocab` ids.
class CountingSource final : public training::SampleSource {
 public:
  CountingSource(int64_t S, int64_t vocab) : S_(S), vocab_(vocab) {}
  int64_t seq_length() const override { return S_; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= S_; ++t)
      tokens[t] = static_cast<int32_t>((index * 7 + t * 3) % vocab_);
  }

 private:
  int64_t S_, vocab_;
};

config::Recipe recipe_from(const std::string& model, const std::string& training,
                           const std::string& extra = "") {
  const std::string yaml = "model: {" + model + "}\ntraining: {" + training +
                           "}\noptimizer: {lr: 0.001}\n"
                           "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n" +
                           extra;
  return config::parse_recipe_string(yaml, "planner_test.yaml");
}

// gpt_tiny-sized: 4 layers, hidden 256, seq 128, micro 4, vocab 8000 (padded to 8064).
config::Recipe gpt_small(const std::string& more_training = "") {
  return recipe_from(
      "num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 128, "
      "vocab_size: 8000, hidden_dropout: 0.1, attention_dropout: 0.1",
      "micro_batch_size: 4, global_batch_size: 4, train_iters: 2, peak_tflops: 1.0, seed: 5" +
          more_training);
}

// LLaMA-style: RMSNorm, SwiGLU, RoPE, GQA (8 heads, 2 groups), untied, no biases.
config::Recipe llama_small(const std::string& more_training = "") {
  return recipe_from(
      "arch: llama, num_layers: 4, hidden_size: 256, num_attention_heads: 8, "
      "num_query_groups: 2, ffn_hidden_size: 704, seq_length: 128, vocab_size: 6000, "
      "normalization: rmsnorm, activation: swiglu, position_embedding: rope, "
      "tie_embeddings: false, add_bias: false",
      "micro_batch_size: 2, global_batch_size: 4, train_iters: 2, peak_tflops: 1.0, seed: 5" +
          more_training);
}

ClusterSpec one_device() {
  ClusterSpec c;
  c.nodes = 1;
  c.gpus_per_node = 1;
  c.gpu_memory_bytes = 64e9;
  return c;
}

struct Measured {
  int64_t peak_bytes;
  double flops_per_step;
  int64_t numel;
};

// Runs `steps` real training steps; the peak of all CPU tensor storage above what was held
// before the trainer was built.
std::optional<Measured> train_and_measure(const config::Recipe& r, int steps) {
  const MemoryStats before = cpu_memory_stats();
  Measured m{};
  {
    auto src = std::make_shared<CountingSource>(r.model.seq_length, r.model.vocab_size);
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(r, r.model.vocab_size, src, src, *world, log);
    for (int i = 1; i <= steps; ++i) t.train_step(i);
    m.flops_per_step = t.flops_per_step();
    m.numel = t.params().numel();
  }
  const MemoryStats after = cpu_memory_stats();
  // The peak counter is process-wide: if an earlier test in this process peaked higher, this
  // run's own peak is hidden (ctest runs every case in its own process).
  if (after.peak_bytes == before.peak_bytes && before.peak_bytes > before.current_bytes)
    return std::nullopt;
  m.peak_bytes = after.peak_bytes - before.current_bytes;
  return m;
}

void expect_memory_prediction(const config::Recipe& r, const char* what) {
  const PlanReport p = planning::plan(r, one_device(), r.model.vocab_size);
  const auto measured = train_and_measure(r, 2);
  if (!measured) GTEST_SKIP() << "an earlier test set a higher peak; run this case alone";
  const double predicted = p.memory().total;
  const double ratio = predicted / static_cast<double>(measured->peak_bytes);
  std::cout << "[memory] " << what << ": measured peak " << measured->peak_bytes / 1048576.0
            << " MiB, predicted " << predicted / 1048576.0 << " MiB (ratio " << ratio
            << "); activations " << p.memory().activations / 1048576.0 << " MiB\n";
  EXPECT_NEAR(ratio, 1.0, 0.15) << what;
  EXPECT_EQ(p.device_stage().parameters, measured->numel) << what;
  EXPECT_DOUBLE_EQ(p.flops_per_step, measured->flops_per_step) << what;
}

// ---- (c) the memory prediction against real CPU training (first: the peak is per process) ----

TEST(PlannerMemory, GptFp32MatchesMeasuredPeak) {
  expect_memory_prediction(gpt_small(), "gpt fp32 dropout");
}

TEST(PlannerMemory, LlamaBf16MatchesMeasuredPeak) {
  expect_memory_prediction(llama_small(", precision: bf16"), "llama bf16");
}

// Activation recomputation (training.recompute) at seq 256, where the attention probabilities
// [b, H, s, s] dominate the activations: none, selective (no probabilities per layer) and full
// (one checkpoint per layer plus one rematerialised layer).
config::Recipe gpt_seq256(const std::string& recompute) {
  return recipe_from(
      "num_layers: 4, hidden_size: 256, num_attention_heads: 8, seq_length: 256, "
      "vocab_size: 8000, hidden_dropout: 0.1, attention_dropout: 0.1",
      "micro_batch_size: 4, global_batch_size: 8, train_iters: 2, peak_tflops: 1.0, seed: 5, "
      "recompute: " +
          recompute);
}

TEST(PlannerMemory, GptSeq256RecomputeNoneMatchesMeasuredPeak) {
  expect_memory_prediction(gpt_seq256("none"), "gpt seq256 recompute none");
}

TEST(PlannerMemory, GptSeq256RecomputeSelectiveMatchesMeasuredPeak) {
  expect_memory_prediction(gpt_seq256("selective"), "gpt seq256 recompute selective");
}

TEST(PlannerMemory, GptSeq256RecomputeFullMatchesMeasuredPeak) {
  expect_memory_prediction(gpt_seq256("full"), "gpt seq256 recompute full");
}

TEST(PlannerMemory, LlamaRecomputeFullMatchesMeasuredPeak) {
  expect_memory_prediction(llama_small(", recompute: full"), "llama recompute full");
}

TEST(PlannerMemory, LlamaRecomputeSelectiveMatchesMeasuredPeak) {
  expect_memory_prediction(llama_small(", recompute: selective"), "llama recompute selective");
}

// Flash attention on the CPU (model.attention_backend: flash): lse [b, H, s] instead of the
// probabilities per layer.
config::Recipe gpt_seq256_flash(const std::string& recompute) {
  config::Recipe r = gpt_seq256(recompute);
  r.model.attention_backend = "flash";
  return r;
}

TEST(PlannerMemory, GptSeq256FlashMatchesMeasuredPeak) {
  expect_memory_prediction(gpt_seq256_flash("none"), "gpt seq256 flash attention");
}

TEST(PlannerMemory, FlashAttentionDropsTheProbabilitiesOnCpu) {
  const auto mem = [](const config::Recipe& r) {
    return planning::plan(r, one_device(), 8000).memory();
  };
  const auto unfused = mem(gpt_seq256("none")), flash = mem(gpt_seq256_flash("none"));
  const double probs = 4.0 * 4 * 8 * 256 * 256, lse = 4.0 * 4 * 8 * 256;
  EXPECT_NEAR(unfused.activations - flash.activations, 4 * (probs - lse), 1e-9 * probs);
  // Nothing left for selective recompute to drop.
  const auto selective = mem(gpt_seq256_flash("selective"));
  EXPECT_DOUBLE_EQ(selective.activations, flash.activations);
  EXPECT_DOUBLE_EQ(selective.workspace, flash.workspace);
}

TEST(PlannerMemory, RecomputeModesOrderOnCpu) {
  const auto mem = [](const std::string& mode) {
    return planning::plan(gpt_seq256(mode), one_device(), 8000).memory();
  };
  const auto none = mem("none"), selective = mem("selective"), full = mem("full");
  // Selective: one probabilities buffer [b, H, s, s] fp32 instead of one per layer.
  const double probs = 4.0 * 4 * 8 * 256 * 256;
  EXPECT_NEAR(none.activations - selective.activations, 4 * probs, 1e-9 * probs);
  EXPECT_NEAR(selective.workspace - none.workspace, probs, 1e-9 * probs);
  EXPECT_LT(full.total, selective.total);
  EXPECT_LT(selective.total, none.total);
  // The same three numbers whatever the recipe's own mode.
  EXPECT_DOUBLE_EQ(none.activations_full, full.activations_per_microbatch);
  EXPECT_DOUBLE_EQ(full.activations_selective, selective.activations_per_microbatch);
}

// ---- (a) parameter counts against the real model ---------------------------------------------

// A communicator that only reports a size and rank: enough to build a tp shard of the model.
class ShapeOnlyComm final : public parallel::Communicator {
 public:
  ShapeOnlyComm(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int world_rank_of(int r) const override { return r; }
  void all_reduce(Tensor&, parallel::ReduceOp) override { fail(); }
  std::unique_ptr<parallel::Work> all_reduce_async(Tensor&, parallel::ReduceOp) override { fail(); }
  void all_gather(const Tensor&, Tensor&) override { fail(); }
  std::unique_ptr<parallel::Work> all_gather_async(const Tensor&, Tensor&) override { fail(); }
  void reduce_scatter(const Tensor&, Tensor&, parallel::ReduceOp) override { fail(); }
  std::unique_ptr<parallel::Work> reduce_scatter_async(const Tensor&, Tensor&,
                                                       parallel::ReduceOp) override {
    fail();
  }
  void broadcast(Tensor&, int) override { fail(); }
  void barrier() override { fail(); }
  void all_to_all(const Tensor&, const std::vector<int64_t>&, Tensor&,
                  const std::vector<int64_t>&) override {
    fail();
  }
  std::unique_ptr<parallel::Work> batch_isend_irecv(std::vector<parallel::P2POp>) override {
    fail();
  }

 private:
  [[noreturn]] static void fail() { throw Error("ShapeOnlyComm: no communication"); }
  int rank_, size_;
  std::string name_ = "shape-only";
};

// Builds the model pieces a (tp rank, pipeline stage) holds and returns their parameter count.
int64_t real_stage_numel(const config::Recipe& r, int64_t vocab, int tp, int tp_rank, int pp,
                         int stage) {
  ShapeOnlyComm comm(tp_rank, tp);
  const models::GPTSpec spec = models::gpt_spec_from_recipe(r, vocab, tp);
  const auto counts = planning::virtual_stage_layers(r, pp, 1);
  models::GPTStage st;
  for (int i = 0; i < stage; ++i) st.first_layer += counts[static_cast<size_t>(i)];
  st.num_layers = counts[static_cast<size_t>(stage)];
  st.pre_process = stage == 0;
  st.post_process = stage == pp - 1;
  ParamStore store;
  models::GPTModel model(spec, store, comm, st);
  store.finalize();
  return store.numel();
}

TEST(PlannerParams, WholeModelMatchesParamStore) {
  for (const config::Recipe& r : {gpt_small(), llama_small()}) {
    const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, 1);
    const int64_t real = real_stage_numel(r, r.model.vocab_size, 1, 0, 1, 0);
    EXPECT_EQ(planning::count_parameters(r.model, V).total, real) << r.model.arch;
    EXPECT_EQ(planning::stage_parameters(r, V, Layout{}, 0), real) << r.model.arch;
  }
}

TEST(PlannerParams, TensorAndPipelineShardsMatchTheModel) {
  for (config::Recipe r : {gpt_small(), llama_small()}) {
    for (auto [tp, pp] : {std::pair{2, 2}, {4, 1}, {1, 4}, {2, 4}}) {
      if (r.model.query_groups() % tp != 0) continue;  // llama: 2 query groups
      r.parallel.tensor = tp;
      r.parallel.pipeline = pp;
      Layout lay;
      lay.tp = tp;
      lay.pp = pp;
      const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, tp);
      for (int stage = 0; stage < pp; ++stage)
        for (int rank = 0; rank < tp; ++rank)
          EXPECT_EQ(planning::stage_parameters(r, V, lay, stage),
                    real_stage_numel(r, r.model.vocab_size, tp, rank, pp, stage))
              << r.model.arch << " tp" << tp << " pp" << pp << " stage " << stage << " rank "
              << rank;
    }
  }
}

TEST(PlannerParams, BertMatchesTheModel) {
  // Post-LN encoder: token-type embeddings + embedding norm on the first stage; MLM head (dense,
  // norm, vocab-parallel bias, tied decoder), pooler and sentence-pair head on the last.
  config::Recipe r = recipe_from(
      "arch: bert, num_layers: 4, hidden_size: 64, num_attention_heads: 4, seq_length: 32, "
      "max_position_embeddings: 40, vocab_size: 1000",
      "micro_batch_size: 2, global_batch_size: 4, train_iters: 1");
  for (auto [tp, pp, nsp] : {std::tuple{1, 1, true},
                             {2, 1, true},
                             {2, 2, true},
                             {1, 4, true},
                             {1, 1, false},
                             {2, 2, false}}) {
    const int64_t V = r.model.padded_vocab_size(1000, tp);
    const models::BertSpec spec = models::make_bert_spec(4, 64, 4, 256, 32, 40, 1000, V, nsp);
    r.data.bert_binary_head = nsp;
    r.parallel.tensor = tp;
    r.parallel.pipeline = pp;
    Layout lay;
    lay.tp = tp;
    lay.pp = pp;
    int64_t whole = 0;
    for (int stage = 0; stage < pp; ++stage) {
      ShapeOnlyComm comm(0, tp);
      models::ModelStage st;
      st.first_layer = stage * (4 / pp);
      st.num_layers = 4 / pp;
      st.pre_process = stage == 0;
      st.post_process = stage == pp - 1;
      ParamStore store;
      models::BertModel model(spec, store, comm, st);
      store.finalize();
      EXPECT_EQ(planning::stage_parameters(r, V, lay, stage), store.numel())
          << "tp" << tp << " pp" << pp << " stage " << stage << " nsp " << nsp;
      whole += store.numel();
    }
    if (tp == 1 && pp == 1) {
      EXPECT_EQ(planning::count_parameters(r.model, V, nsp).total, whole);
    }
  }
}

TEST(PlannerParams, UnevenPipelineLayers) {
  config::Recipe r = gpt_small();
  r.parallel.pipeline = 2;
  r.parallel.pipeline_layers = {3, 1};
  Layout lay;
  lay.pp = 2;
  const int64_t V = r.model.padded_vocab_size(r.model.vocab_size, 1);
  for (int stage = 0; stage < 2; ++stage)
    EXPECT_EQ(planning::stage_parameters(r, V, lay, stage),
              real_stage_numel(r, r.model.vocab_size, 1, 0, 2, stage));
}

TEST(PlannerParams, KnownModelSizes) {
  // GPT-2 small: 124,475,904 parameters with the 50304-row padded table (nanoGPT counts
  // 124.44M with 50257 rows).
  config::Recipe g =
      recipe_from("num_layers: 12, hidden_size: 768, num_attention_heads: 12, seq_length: 1024",
                  "micro_batch_size: 1, "
                  "global_batch_size: 1, train_iters: 1");
  EXPECT_EQ(planning::count_parameters(g.model, 50304).total, 124475904);
  // LLaMA-2 7B: 6,738,415,616.
  config::Recipe l = recipe_from(
      "arch: llama, num_layers: 32, hidden_size: 4096, num_attention_heads: 32, "
      "ffn_hidden_size: 11008, seq_length: 4096, normalization: rmsnorm, activation: swiglu, "
      "position_embedding: rope, tie_embeddings: false, add_bias: false",
      "micro_batch_size: 1, global_batch_size: 1, train_iters: 1");
  EXPECT_EQ(planning::count_parameters(l.model, 32000).total, 6738415616);
}

// ---- (b) FLOPs against the trainer -------------------------------------------------------------

TEST(PlannerFlops, EqualTheTrainers) {
  for (const config::Recipe& r : {gpt_small(), llama_small()}) {
    auto src = std::make_shared<CountingSource>(r.model.seq_length, r.model.vocab_size);
    auto world = parallel::make_single_process_communicator();
    std::ostringstream log;
    training::Trainer t(r, r.model.vocab_size, src, src, *world, log);
    const PlanReport p = planning::plan(r, one_device(), r.model.vocab_size);
    EXPECT_DOUBLE_EQ(p.flops_per_step, t.flops_per_step()) << r.model.arch;
    EXPECT_EQ(p.flops_per_step, p.hardware_flops_per_step);
  }
}

TEST(PlannerFlops, RecomputeAddsHardwareFlops) {
  config::Recipe r = gpt_small(", device: cuda");
  const double base = planning::plan(r, one_device(), 8000).flops_per_step;
  r.training.recompute = "full";
  const PlanReport full = planning::plan(r, one_device(), 8000);
  EXPECT_EQ(full.flops_per_step, base);
  EXPECT_GT(full.hardware_flops_per_step, base * 1.2);
  EXPECT_LT(full.hardware_flops_per_step, base * 4.0 / 3.0);
  r.training.recompute = "selective";
  const PlanReport sel = planning::plan(r, one_device(), 8000);
  // + the attention core forward: 4 B S^2 L H d.
  EXPECT_DOUBLE_EQ(sel.hardware_flops_per_step - base,
                   4.0 * static_cast<double>(r.training.global_batch_size) * 128 * 128 * 4 * 256);
}

// ---- (d) a hand-checked breakdown --------------------------------------------------------------

TEST(PlannerMemory, HandCheckedCudaBreakdown) {
  // GPT, 2 layers, h 64, 4 heads, s 32, b 2, vocab 128 (tied), bf16, flash attention, no dropout.
  config::Recipe r = recipe_from(
      "num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 128",
      "device: cuda, precision: bf16, micro_batch_size: 2, global_batch_size: 8, train_iters: 1");
  const PlanReport p = planning::plan(r, one_device(), 128);
  // Per layer: norms 2*128, qkv 192*64+192, proj 64*64+64, fc1 256*64+256, fc2 64*256+64.
  EXPECT_EQ(p.params.per_layer, 49984);
  EXPECT_EQ(p.params.embedding, 128 * 64 + 32 * 64);
  EXPECT_EQ(p.params.head, 128);  // final norm; the LM head is the tied table
  const double P = 10240 + 2 * 49984 + 128;
  EXPECT_EQ(p.params.total, P);
  const auto& m = p.memory();
  EXPECT_EQ(m.weights, 2 * P);
  EXPECT_EQ(m.gradients, 4 * P);
  EXPECT_EQ(m.master, 4 * P);
  EXPECT_EQ(m.optimizer, 8 * P);
  EXPECT_EQ(m.optimizer_without_distributed, 12 * P);
  // Layer: s b h (4a) = 32768 (norm/qkv/fc1 inputs) + s b a (2Hd + 2Gd + F + F) = 98304
  // (Q, K, V, proj input, GeLU input and output) + flash softmax stats 4 b H s = 1024.
  const double layer = 32768 + 98304 + 1024;
  // Last stage: final-norm and output-layer inputs 2 a s b h = 16384, fp32 softmax 4 s b V.
  const double post = 16384 + 4 * 64 * 128;
  EXPECT_EQ(m.activations_none, 2 * layer + post);
  EXPECT_EQ(m.activations_selective, 2 * (layer - 1024) + post);
  EXPECT_EQ(m.activations_full, 2 * (2 * 64 * 64) + post);
  EXPECT_EQ(m.in_flight, 1);
  EXPECT_EQ(m.activations, m.activations_none);
  EXPECT_EQ(m.workspace, 2 * 2 * 64 * 128);  // bf16 logits + their gradient
  EXPECT_EQ(m.reserve, 2e9);
  EXPECT_EQ(m.total, 18 * P + 2 * layer + post + m.workspace + 2e9);
  EXPECT_TRUE(p.fits);

  // Distributed optimizer over dp 4: master and Adam state / 4 (Megatron's 6 + 12/dp).
  r.optimizer.distributed = true;
  ClusterSpec four = one_device();
  four.gpus_per_node = 4;
  const PlanReport d = planning::plan(r, four, 128);
  EXPECT_EQ(d.layout.dp, 4);
  EXPECT_EQ(d.layout.num_microbatches, 1);
  EXPECT_EQ(d.memory().master + d.memory().optimizer, 12 * P / 4);
  EXPECT_EQ(d.memory().optimizer_with_distributed, 12 * P / 4);
  EXPECT_EQ(d.memory().weights + d.memory().gradients, 6 * P);
}

TEST(PlannerMemory, KorthikantiWithTensorAndSequenceParallel) {
  // GPT with 4h FFN and dropout: 34 s b h / t per layer with TP + SP, (10 + 24/t) s b h without
  // SP (unfused attention adds 5 a s^2 b / t with a = heads).
  config::Recipe r = recipe_from(
      "num_layers: 8, hidden_size: 1024, num_attention_heads: 16, seq_length: 512, "
      "vocab_size: 1024, hidden_dropout: 0.1, attention_dropout: 0.1",
      "device: cuda, precision: bf16, micro_batch_size: 2, global_batch_size: 16, "
      "train_iters: 1, recompute: selective",
      "parallel: {tensor: 4, sequence_parallel: true}");
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  const double sbh = 512.0 * 2 * 1024, t = 4;
  auto per_layer = [&](const PlanReport& p) {
    const auto& m = p.memory();
    return (m.activations_selective - m.activations_full) / 8 +
           2 * sbh / (p.layout.sequence_parallel ? t : 1);
  };
  const PlanReport sp = planning::plan(r, c, 1024);
  EXPECT_DOUBLE_EQ(per_layer(sp), 34 * sbh / t);
  r.parallel.sequence_parallel = false;
  const PlanReport nosp = planning::plan(r, c, 1024);
  EXPECT_DOUBLE_EQ(per_layer(nosp), (10 + 24 / t) * sbh);
  c.flash_attention = false;
  const PlanReport unfused = planning::plan(r, c, 1024);
  const auto& m = unfused.memory();
  EXPECT_DOUBLE_EQ((m.activations_none - m.activations_selective) / 8,
                   5.0 * 16 * 512 * 512 * 2 / t);
}

// ---- pipeline in-flight count against the schedules -------------------------------------------

TEST(PlannerPipeline, LiveActivationsMatchTheSchedules) {
  for (int pp : {2, 4}) {
    for (int vpp : {1, 2}) {
      for (int m : {1, 2, 4, 8, 12}) {
        if (vpp > 1 && m % pp != 0) continue;
        const auto schedule = pipeline::make_schedule(pp, m, vpp);
        for (int stage = 0; stage < pp; ++stage) {
          int live = 0, peak = 0;
          for (const auto& a : schedule.ranks[static_cast<size_t>(stage)]) {
            if (a.kind == pipeline::ActionKind::Forward) peak = std::max(peak, ++live);
            if (a.kind == pipeline::ActionKind::Backward) --live;
          }
          EXPECT_EQ(planning::live_chunk_activations(pp, vpp, m, stage), peak)
              << "pp " << pp << " vpp " << vpp << " m " << m << " stage " << stage;
        }
      }
    }
  }
}

TEST(PlannerPipeline, FirstStageHoldsTheMostActivations) {
  config::Recipe r = gpt_small(", device: cuda");
  r.training.global_batch_size = 64;
  r.parallel.pipeline = 4;
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  const PlanReport p = planning::plan(r, c, 8000);
  ASSERT_EQ(p.stages.size(), 4u);
  EXPECT_EQ(p.stages[0].memory.in_flight, 4);
  EXPECT_EQ(p.stages[3].memory.in_flight, 1);
  // Interleaved: p (1 + (p - 1) / (p v)) on stage 0.
  r.parallel.virtual_pipeline = 2;
  r.model.num_layers = 8;
  const PlanReport v = planning::plan(r, c, 8000);
  EXPECT_DOUBLE_EQ(v.stages[0].memory.in_flight, 4 * (1 + 3.0 / 8));
}

// ---- (e) search and large models ---------------------------------------------------------------

config::Recipe gpt_large(int64_t layers, int64_t hidden, int64_t heads, int64_t global) {
  return recipe_from("num_layers: " + std::to_string(layers) +
                         ", hidden_size: " + std::to_string(hidden) +
                         ", num_attention_heads: " + std::to_string(heads) +
                         ", seq_length: 2048, hidden_dropout: 0.1, attention_dropout: 0.1",
                     "device: cuda, precision: bf16, micro_batch_size: 1, global_batch_size: " +
                         std::to_string(global) + ", train_iters: 1");
}

ClusterSpec h100s(int64_t nodes) {
  ClusterSpec c;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.gpu_memory_bytes = 80e9;
  c.gpu_tflops = 989;
  return c;
}

TEST(PlannerSearch, Gpt13bOnFourNodes) {
  const config::Recipe r = gpt_large(40, 5120, 40, 512);
  const auto result = planning::search(r, h100s(4), 50257);
  ASSERT_FALSE(result.fitting.empty());
  EXPECT_GT(result.too_big, 0);
  EXPECT_EQ(result.candidates, result.too_big + static_cast<int64_t>(result.fitting.size()));
  bool known_good = false;
  for (size_t i = 0; i < result.fitting.size(); ++i) {
    const PlanReport& p = result.fitting[i];
    EXPECT_TRUE(p.fits);
    EXPECT_LE(p.memory().total, 80e9);
    EXPECT_EQ(p.layout.tp * p.layout.pp * p.layout.dp, 32);
    EXPECT_EQ(p.layout.micro_batch * p.layout.num_microbatches * p.layout.dp, 512);
    if (i > 0) {
      EXPECT_GE(p.time.step, result.fitting[i - 1].time.step);
    }
    EXPECT_GT(p.time.mfu, 0.1);
    EXPECT_LT(p.time.mfu, 0.7);
    // Megatron's usual 13B layout: tp 2, no pipeline, sequence parallel, distributed optimizer.
    const Layout& l = p.layout;
    if (l.tp == 2 && l.pp == 1 && l.dp == 16 && l.sequence_parallel && l.distributed_optimizer &&
        l.micro_batch == 1)
      known_good = true;
  }
  EXPECT_TRUE(known_good);
  // 13B with no model parallelism does not fit 80 GB, even with the distributed optimizer.
  for (const PlanReport& p : result.fitting) EXPECT_GT(p.layout.tp * p.layout.pp, 1);
  const std::string table = planning::search_table(result, 5);
  EXPECT_THAT(table, HasSubstr("recompute"));
  EXPECT_THAT(table, HasSubstr("   1"));
}

TEST(PlannerSearch, Gpt175bFitsWithTp8Pp16) {
  config::Recipe r = gpt_large(96, 12288, 96, 1536);
  r.parallel.tensor = 8;
  r.parallel.pipeline = 16;
  r.parallel.sequence_parallel = true;
  r.optimizer.distributed = true;
  const ClusterSpec c = h100s(128);  // 1024 GPUs: dp 8
  for (const char* rc : {"selective", "full"}) {
    r.training.recompute = rc;
    const PlanReport p = planning::plan(r, c, 50257);
    EXPECT_EQ(p.layout.dp, 8);
    EXPECT_TRUE(p.fits) << rc << ": " << p.to_text();
    EXPECT_NEAR(static_cast<double>(p.params.total), 175e9, 1e9);
    EXPECT_GT(p.time.mfu, 0.2) << rc;
    EXPECT_LT(p.time.mfu, 0.65) << rc;
  }
  r.parallel.tensor = 1;
  r.parallel.pipeline = 1;
  const PlanReport single = planning::plan(r, h100s(64), 50257);  // dp 512
  EXPECT_FALSE(single.fits);
  EXPECT_GT(single.memory().weights, 80e9);
}

TEST(PlannerSearch, OnlyFittingLayoutsWithCpuRecompute) {
  config::Recipe r = gpt_small();
  r.training.global_batch_size = 16;
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  c.gpu_memory_bytes = 0.35e9;
  const auto result = planning::search(r, c, 8000);
  ASSERT_FALSE(result.fitting.empty());
  std::set<std::string> modes;
  for (const PlanReport& p : result.fitting) {
    EXPECT_LE(p.memory().total, 0.35e9);
    modes.insert(p.layout.recompute);
  }
  // The CPU trainer recomputes too: every mode is a candidate.
  EXPECT_EQ(modes, (std::set<std::string>{"none", "selective", "full"}));
  c.gpu_memory_bytes = 1e6;
  EXPECT_TRUE(planning::search(r, c, 8000).fitting.empty());
}

// ---- shipped recipes on their documented clusters ---------------------------------------------

int64_t vocab_for(const config::Recipe& r) {
  if (r.model.vocab_size > 0) return r.model.vocab_size;
  const auto& t = r.data.tokenizer;
  if (t.type == "NullTokenizer" || t.vocab_size > 0) return t.vocab_size;
  try {
    return data::make_tokenizer({t.type, config::resolve_path(r, t.vocab_file),
                                 config::resolve_path(r, t.merge_file),
                                 config::resolve_path(r, t.model)})
        ->vocab_size();
  } catch (const std::exception&) {
  }
  // Tokenizer files not shipped: the published vocabulary sizes.
  if (t.type == "GPT2BPETokenizer") return 50257;
  if (t.type.rfind("BertWordPiece", 0) == 0) return 30522;
  return 32000;
}

// Every shipped recipe loads and validates; the full-size (cuda) ones record the cluster they
// are written for, and their layout fits it.
TEST(PlannerRecipes, FullSizeRecipesFitTheirCluster) {
  int planned = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MEGATRON_SOURCE_DIR) + "/recipes")) {
    if (entry.path().extension() != ".yaml") continue;
    const config::Recipe r = config::load_recipe(entry.path().string());
    if (r.training.device == "cuda") {
      EXPECT_TRUE(r.cluster.specified())
          << entry.path() << ": a full-size recipe states its cluster (cluster: section)";
    }
    if (!r.cluster.specified()) continue;
    const PlanReport p = planning::plan(r, planning::cluster_from_recipe(r), vocab_for(r));
    EXPECT_TRUE(p.fits) << entry.path() << "\n" << p.to_text();
    EXPECT_EQ(p.cluster.world(), r.cluster.nodes * r.cluster.gpus_per_node);
    ++planned;
  }
  EXPECT_GE(planned, 1);
}

// ---- (f) command line --------------------------------------------------------------------------

TEST(PlannerCli, MemorySizes) {
  EXPECT_EQ(planning::parse_memory_size("80GB"), 80e9);
  EXPECT_EQ(planning::parse_memory_size("80"), 80e9);
  EXPECT_EQ(planning::parse_memory_size("80gib"), 80.0 * 1073741824.0);
  EXPECT_EQ(planning::parse_memory_size("1.5TB"), 1.5e12);
  EXPECT_EQ(planning::parse_memory_size("512MiB"), 512.0 * 1048576.0);
  EXPECT_EQ(planning::parse_memory_size(" 40 GB "), 40e9);
  for (const char* bad : {"", "GB", "80XB", "-80GB", "0", "eighty", "80GB80", "nan"})
    EXPECT_THROW(planning::parse_memory_size(bad), InputError) << bad;
}

std::string parse_error(const std::vector<std::string>& args) {
  try {
    planning::parse_plan_args(args);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(PlannerCli, ParsesFlags) {
  const auto a = planning::parse_plan_args({"--recipe",
                                            "r.yaml",
                                            "--nodes",
                                            "4",
                                            "--gpus-per-node=8",
                                            "--gpu-memory",
                                            "80GiB",
                                            "--gpu-tflops",
                                            "989",
                                            "--search",
                                            "--top",
                                            "3",
                                            "--json",
                                            "--set",
                                            "training.seed=2",
                                            "--vocab",
                                            "50257",
                                            "--no-flash-attention",
                                            "--efficiency",
                                            "0.5"});
  EXPECT_EQ(a.recipe, "r.yaml");
  EXPECT_EQ(*a.nodes, 4);
  EXPECT_EQ(*a.gpus_per_node, 8);
  EXPECT_EQ(*a.gpu_memory_bytes, 80.0 * 1073741824.0);
  EXPECT_EQ(*a.gpu_tflops, 989);
  EXPECT_TRUE(a.search && a.json);
  EXPECT_FALSE(a.flash_attention);
  EXPECT_EQ(a.top, 3);
  EXPECT_EQ(*a.vocab, 50257);
  EXPECT_EQ(*a.efficiency, 0.5);
  EXPECT_EQ(a.overrides, std::vector<std::string>{"training.seed=2"});
}

TEST(PlannerCli, BadFlagsNameTheFlagAndValue) {
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes", "-2"}), HasSubstr("--nodes: "));
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes", "-2"}), HasSubstr("'-2'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpus-per-node", "eight"}),
              HasSubstr("--gpus-per-node: expected a positive integer, got 'eight'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpu-memory", "80XB"}),
              HasSubstr("--gpu-memory: unknown size unit 'xb' in '80XB'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--gpu-tflops", "0"}),
              HasSubstr("--gpu-tflops: expected a positive number, got '0'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--top", "0"}), HasSubstr("--top: "));
  EXPECT_THAT(parse_error({"--recipe", "r", "--efficiency", "1.5"}),
              HasSubstr("--efficiency: must be in (0, 1], got '1.5'"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--nodes"}), HasSubstr("--nodes: needs a value"));
  EXPECT_THAT(parse_error({"--recipe", "r", "--frobnicate"}),
              HasSubstr("unknown argument '--frobnicate'"));
  EXPECT_THAT(parse_error({"--search=yes", "--recipe", "r"}),
              HasSubstr("--search: takes no value"));
  EXPECT_THAT(parse_error({"--nodes", "2"}), HasSubstr("--recipe: required"));
}

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = planning::run_plan_cli(args, out, err);
  return {code, out.str(), err.str()};
}

class PlannerCliRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("megatron_planner_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }
  std::filesystem::path dir_;
};

constexpr const char* kCudaRecipe =
    "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 16, seq_length: 1024}\n"
    "training: {device: cuda, precision: bf16, micro_batch_size: 4, global_batch_size: 64, "
    "train_iters: 10}\n"
    "optimizer: {lr: 0.001}\n"
    "data: {tokenizer: {type: ByteTokenizer}, train: [x]}\n"
    "cluster: {nodes: 1, gpus_per_node: 8, gpu_memory_gb: 80, gpu_tflops: 989}\n";

TEST_F(PlannerCliRun, TextJsonAndSearch) {
  const std::string recipe = write("r.yaml", kCudaRecipe);
  const CliResult text = cli({"--recipe", recipe});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("memory per device"));
  EXPECT_THAT(text.out, HasSubstr("fits in 80.0 GB"));
  EXPECT_THAT(text.out, HasSubstr("1 node(s) x 8 devices"));
  EXPECT_THAT(text.out, HasSubstr("MFU"));

  const CliResult js = cli({"--recipe", recipe, "--json", "--gpu-memory", "40GB"});
  ASSERT_EQ(js.code, 0) << js.err;
  const auto j = nlohmann::json::parse(js.out);
  EXPECT_EQ(j["cluster"]["gpu_memory_bytes"], 40e9);
  EXPECT_EQ(j["layout"]["dp"], 8);
  EXPECT_EQ(j["padded_vocab"], 384);  // ByteTokenizer 257 padded to 128
  EXPECT_TRUE(j["fits"].get<bool>());
  EXPECT_GT(j["memory"]["total"].get<double>(), 0);

  const CliResult small = cli({"--recipe", recipe, "--gpu-memory", "1GB"});
  EXPECT_EQ(small.code, 3);
  EXPECT_THAT(small.out, HasSubstr("DOES NOT FIT"));

  const CliResult s = cli({"--recipe", recipe, "--search", "--top", "4", "--json", "--nodes", "2"});
  ASSERT_EQ(s.code, 0) << s.err;
  const auto sj = nlohmann::json::parse(s.out);
  EXPECT_EQ(sj["plan"]["cluster"]["world"], 16);
  EXPECT_EQ(sj["search"]["results"].size(), 4u);
  EXPECT_LE(sj["search"]["results"][0]["time"]["step_s"].get<double>(),
            sj["search"]["results"][3]["time"]["step_s"].get<double>());
  const CliResult st = cli({"--recipe", recipe, "--search"});
  EXPECT_EQ(st.code, 0);
  EXPECT_THAT(st.out, HasSubstr("by estimated step time"));
}

TEST_F(PlannerCliRun, Errors) {
  const std::string recipe = write("r.yaml", kCudaRecipe);
  CliResult r = cli({"--recipe", (dir_ / "missing.yaml").string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing.yaml"));
  r = cli({"--recipe", recipe, "--nodes", "zero"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("--nodes: expected a positive integer, got 'zero'"));
  // pp 8 does not divide a world of 4.
  r = cli({"--recipe", recipe, "--set", "parallel.pipeline=8", "--gpus-per-node", "4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("parallel.tensor * parallel.pipeline"));
  // Tokenizer files missing and no --vocab: a clear message.
  r = cli({"--recipe", recipe, "--set", "data.tokenizer.type=GPT2BPETokenizer", "--set",
           "data.tokenizer.vocab_file=/nonexistent/v.json", "--set",
           "data.tokenizer.merge_file=/nonexistent/m.txt"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("pass --vocab N"));
  r = cli({"--recipe", recipe, "--set", "data.tokenizer.type=GPT2BPETokenizer", "--set",
           "data.tokenizer.vocab_file=/nonexistent/v.json", "--set",
           "data.tokenizer.merge_file=/nonexistent/m.txt", "--vocab", "50257"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("vocab 50257 padded to 50304"));
  EXPECT_EQ(cli({"--help"}).code, 0);
}

// The binary itself (built with the tools): exit codes and where messages go.
TEST_F(PlannerCliRun, Binary) {
  const std::string bin = std::string(MEGATRON_BINARY_DIR) + "/bin/plan";
  if (!std::filesystem::exists(bin)) GTEST_SKIP() << bin << " not built";
  const std::string recipe = write("r.yaml", kCudaRecipe);
  auto run = [&](const std::string& args) {
    const std::string cmd = bin + " " + args + " > " + (dir_ / "out.txt").string() + " 2> " +
                            (dir_ / "err.txt").string();
    const int status = std::system(cmd.c_str());
    std::ifstream out(dir_ / "out.txt"), err(dir_ / "err.txt");
    std::stringstream o, e;
    o << out.rdbuf();
    e << err.rdbuf();
    return std::tuple{WIFEXITED(status) ? WEXITSTATUS(status) : -1, o.str(), e.str()};
  };
  auto [ok, ok_out, ok_err] = run("--recipe " + recipe + " --json");
  EXPECT_EQ(ok, 0) << ok_err;
  EXPECT_TRUE(nlohmann::json::parse(ok_out)["fits"].get<bool>());
  auto [bad, bad_out, bad_err] = run("--recipe " + recipe + " --gpu-memory 80XB");
  EXPECT_EQ(bad, 1);
  EXPECT_THAT(bad_err, HasSubstr("--gpu-memory: unknown size unit 'xb' in '80XB'"));
  EXPECT_TRUE(bad_out.empty());
  auto [big, big_out, big_err] = run("--recipe " + recipe + " --gpu-memory 2GB");
  EXPECT_EQ(big, 3) << big_err;
  EXPECT_THAT(big_out, HasSubstr("DOES NOT FIT"));
}

}  // namespace
}  // namespace megatron
