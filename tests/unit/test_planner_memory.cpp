// The planner's memory prediction (megatron/planning/planner.h) against the measured peak of real
// CPU training steps (recompute modes, flash attention), a hand-checked breakdown, activations
// with tensor and sequence parallelism, and the pipeline in-flight count against the schedules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "megatron/pipeline/dualpipe_v.h"
#include "megatron/pipeline/schedule.h"
#include "megatron/pipeline/simulator.h"
#include "megatron/pipeline/zero_bubble.h"
#include "megatron/planning/planner.h"
#include "megatron/training/trainer.h"
#include "tests/support/planner_test_util.h"

namespace megatron {
namespace {

using planning::ClusterSpec;
using planning::PlanReport;
using planning::testing::CountingSource;
using planning::testing::gpt_small;
using planning::testing::llama_small;
using planning::testing::one_device;
using planning::testing::recipe_from;

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

// LoRA: gradients, masters and Adam state for the adapters only (the frozen base: weights only).
config::Recipe llama_lora(const std::string& training_extra) {
  config::Recipe r = llama_small(training_extra);
  r.peft.type = "lora";
  r.peft.dim = 8;
  r.validate();
  return r;
}
TEST(PlannerMemory, LlamaLoraMatchesMeasuredPeak) {
  expect_memory_prediction(llama_lora(""), "llama lora fp32");
}
TEST(PlannerMemory, LlamaFp32MatchesMeasuredPeak) {
  expect_memory_prediction(llama_small(""), "llama fp32 (full fine-tuning, beside lora)");
}
TEST(PlannerMemory, LlamaLoraBf16MatchesMeasuredPeak) {
  expect_memory_prediction(llama_lora(", precision: bf16"), "llama lora bf16");
}

// fp16 widens its linear layers to fp32 GEMMs a block of rows at a time on every CPU (bf16 only
// where the CPU lacks bf16 instructions): the output layer's block is the largest copy.
TEST(PlannerMemory, GptFp16MatchesMeasuredPeak) {
  expect_memory_prediction(gpt_seq256("none, precision: fp16"), "gpt seq256 fp16");
}

// model.kv_channels 64 (not 256 / 8 = 32): the attention activations twice as wide as hidden.
TEST(PlannerMemory, LlamaKvChannelsMatchesMeasuredPeak) {
  config::Recipe r = llama_small();
  r.model.kv_channels = 64;
  r.validate();
  expect_memory_prediction(r, "llama kv_channels 64");
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
  r.model.attention_backend = config::AttentionBackend::Flash;
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
  // The trainer keeps each bucket's fp32 reduce-scatter output (optimizer/grad_sync.cpp).
  EXPECT_EQ(d.layout.sharding, config::ShardingStrategy::Optim);
  EXPECT_EQ(d.memory().grad_scratch, 4 * P / 4);
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

// Most forwards of a stage's list whose activations are held: until their backward, or their
// W where the list has WeightGrad actions.
int peak_live(const std::vector<pipeline::Action>& actions) {
  const bool split = std::any_of(actions.begin(), actions.end(), [](const pipeline::Action& a) {
    return a.kind == pipeline::ActionKind::WeightGrad;
  });
  const auto frees = split ? pipeline::ActionKind::WeightGrad : pipeline::ActionKind::Backward;
  int live = 0, peak = 0;
  for (const auto& a : actions) {
    if (a.kind == pipeline::ActionKind::Forward) peak = std::max(peak, ++live);
    if (a.kind == frees) --live;
  }
  return peak;
}

TEST(PlannerPipeline, LiveActivationsMatchTheSchedules) {
  for (int pp : {2, 4}) {
    for (int vpp : {1, 2}) {
      for (int m : {1, 2, 4, 8, 12}) {
        if (vpp > 1 && m % pp != 0) continue;
        const auto schedule = pipeline::make_schedule(pp, m, vpp);
        for (int stage = 0; stage < pp; ++stage) {
          const int peak = peak_live(schedule.ranks[static_cast<size_t>(stage)]);
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

// ZB-H1: every stage holds min(p, m) micro-batches until their W (the schedule's own peak), the
// bubble is a third of 1F1B's in micro-batch passes (a half with full recompute) as the
// simulator finds with F = B = W, and the W's copies add to the activations.
TEST(PlannerPipeline, ZeroBubbleMemoryAndBubbleFollowTheSchedule) {
  for (int pp : {2, 4})
    for (int m : {1, 2, 4, 8, 12}) {
      const auto schedule = pipeline::zero_bubble_h1(pp, m);
      for (int stage = 0; stage < pp; ++stage) {
        const int peak = peak_live(schedule.ranks[static_cast<size_t>(stage)]);
        EXPECT_EQ(planning::live_chunk_activations(pp, 1, m, stage, config::PipelineSchedule::ZbH1),
                  peak)
            << "pp " << pp << " m " << m << " stage " << stage;
      }
    }
  planning::Layout lay;
  lay.pp = 4;
  EXPECT_DOUBLE_EQ(planning::bubble_microbatches(lay), 3.0);
  lay.schedule = config::PipelineSchedule::ZbH1;
  pipeline::CostModel equal;
  equal.forward_s = 1, equal.backward_s = 2, equal.weight_s = 1;
  const auto sim = pipeline::simulate(pipeline::zero_bubble_h1(4, 8), equal);
  EXPECT_DOUBLE_EQ(planning::bubble_microbatches(lay), (sim.makespan_s - 8 * 3.0) / 3.0);
  lay.recompute = config::RecomputeGranularity::Full;
  EXPECT_DOUBLE_EQ(planning::bubble_microbatches(lay), 1.5);

  config::Recipe r = gpt_small("");
  r.training.global_batch_size = 64;
  r.parallel.pipeline = 4;
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  const PlanReport base = planning::plan(r, c, 8000);
  r.parallel.pipeline_schedule = config::PipelineSchedule::ZbH1;
  const PlanReport zb = planning::plan(r, c, 8000);
  EXPECT_NEAR(zb.time.bubble, base.time.bubble / 3, 1e-9 * base.time.bubble);
  EXPECT_EQ(zb.stages[3].memory.in_flight, 4);
  EXPECT_GT(zb.stages[0].memory.activations, base.stages[0].memory.activations);
}

// DualPipeV: 2 pp + 1 chunk activations on stage 0 (the simulator's peak, whole and split
// backwards mixed), and ZB-V's bubble with equal passes.
TEST(PlannerPipeline, DualPipeVMemoryAndBubbleFollowTheSchedule) {
  pipeline::CostModel equal;
  equal.forward_s = 1, equal.backward_s = 2, equal.weight_s = 1;
  for (int pp : {2, 4})
    for (int m : {2 * pp, 3 * pp, 4 * pp}) {
      const auto sim = pipeline::simulate(pipeline::dualpipe_v(pp, m), equal);
      ASSERT_TRUE(sim.ok()) << sim.report();
      EXPECT_EQ(planning::live_chunk_activations(pp, 2, m, 0, config::PipelineSchedule::DualPipeV),
                *std::max_element(sim.peak_in_flight.begin(), sim.peak_in_flight.end()))
          << "pp " << pp << " m " << m;
    }
  planning::Layout lay;
  lay.pp = 4;
  lay.vpp = 2;
  lay.schedule = config::PipelineSchedule::DualPipeV;
  const auto sim = pipeline::simulate(pipeline::dualpipe_v(4, 8), equal);
  EXPECT_DOUBLE_EQ(planning::bubble_microbatches(lay), (sim.makespan_s - 8 * 3.0) / 3.0);

  config::Recipe r = gpt_small("");
  r.training.global_batch_size = 64;
  r.model.num_layers = 8;
  r.parallel.pipeline = 4;
  r.parallel.virtual_pipeline = 2;
  r.parallel.pipeline_schedule = config::PipelineSchedule::DualPipeV;
  ClusterSpec c = one_device();
  c.gpus_per_node = 4;
  const PlanReport dv = planning::plan(r, c, 8000);
  EXPECT_DOUBLE_EQ(dv.stages[0].memory.in_flight, 4.5);  // 9 half-stage chunks
  EXPECT_THAT(dv.layout.describe(), ::testing::HasSubstr(" dualpipe_v"));
}

}  // namespace
}  // namespace megatron
