// Training-loop pieces: parameter identity and shard-independent init, the LR schedule,
// Megatron's FLOPs formula, and the trainer's determinism and micro-batch equivalence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megatron/optimizer/lr_schedule.h"
#include "megatron/planning/flops.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

TEST(ParamStore, ShardedInitMatchesTheGlobalInit) {
  ParamStore full;
  Parameter& w = full.add("w", {6, 10}, {ParamInit::Kind::Normal, 1.0f}, true);
  full.finalize();
  full.initialize(9);
  for (int dim : {0, 1}) {
    for (int64_t shard = 0; shard < 2; ++shard) {
      ParamStore part;
      Parameter& p = part.add("w", {6, 10}, {ParamInit::Kind::Normal, 1.0f}, true,
                              ShardSpec{dim, ShardAxis::Tensor, shard, 2});
      part.finalize();
      part.initialize(9);
      for (int64_t i = 0; i < p.weight.numel(); ++i)
        ASSERT_EQ(p.weight.data<float>()[i], w.weight.data<float>()[p.global_index(i)])
            << "dim " << dim << " shard " << shard << " element " << i;
    }
  }
}

TEST(ParamStore, BuffersAreInBackwardOrderAndNamesUnique) {
  ParamStore s;
  Parameter& a = s.add("a", {3}, {}, true);
  Parameter& b = s.add("b", {4}, {}, true);
  EXPECT_THROW(s.add("a", {1}, {}, true), Error);
  s.finalize();
  EXPECT_EQ(b.offset, 0);  // registered last, its gradient is ready first
  EXPECT_EQ(a.offset, 4);
  EXPECT_EQ(s.numel(), 7);
}

// pretrain prints the ranks' peak memory, then the validation summary with its own number format:
// the report leaves the stream's format as it found it.
TEST(Metrics, RankMemoryReportLeavesTheStreamFormatAlone) {
  auto world = parallel::make_single_process_communicator();
  std::ostringstream out;
  training::report_rank_memory(*world, Device::CPU, out);
  EXPECT_THAT(out.str(),
              ::testing::StartsWith("peak memory per rank (cpu tensors / process RSS, MiB): 0: "));
  std::ostringstream line;
  line.copyfmt(out);
  line << 100.0 * 8.4 / 9.0;
  EXPECT_EQ(line.str(), "93.3333");  // not "9e+01" (precision 0 left behind)
}

// The logging rank's sink of a one-process CPU run (fp32, a nominal peak).
training::MetricsSink logger_sink(const config::Recipe& recipe, std::ostream& out) {
  return training::MetricsSink(recipe, true, out,
                               training::ComputePeak::decide(Device::CPU, DType::F32, 0.5, 0.0),
                               Device::CPU, 1);
}

// The step and validation lines set their own formats and leave the stream's as they found it
// (pretrain's closing summary once printed "9 -> 5 (6e+01% of the first)" after a step line).
TEST(Metrics, StepAndEvalLinesLeaveTheStreamFormatAlone) {
  std::ostringstream out;
  training::MetricsSink sink = logger_sink(config::Recipe{}, out);
  training::StepMetrics step;
  step.iteration = 3;
  step.loss = 5.25;
  step.tokens_per_s = 1234.5;
  sink.step(step, true);
  training::EvalMetrics eval;
  eval.iteration = 3;
  eval.loss = 5.5;
  sink.eval(eval);
  EXPECT_THAT(out.str(), ::testing::HasSubstr("loss 5.2500"));
  EXPECT_THAT(out.str(), ::testing::HasSubstr("val_loss 5.5000"));
  EXPECT_EQ(out.precision(), 6);
  EXPECT_EQ(out.flags() & std::ios_base::floatfield, std::ios_base::fmtflags{});
  std::ostringstream line;
  line.copyfmt(out);
  line << 100.0 * 8.4 / 9.0;
  EXPECT_EQ(line.str(), "93.3333");
}

// "of gemm" is a share of the start-up probe's rate: above 100% the line says why instead of
// printing an impossible-looking share alone.
TEST(Metrics, AShareAboveTheGemmProbeSaysWhy) {
  std::ostringstream out;
  training::MetricsSink sink = logger_sink(config::Recipe{}, out);
  training::StepMetrics step;
  step.iteration = 1;
  step.of_gemm = 0.92;
  sink.step(step, true);
  EXPECT_THAT(out.str(), ::testing::HasSubstr("(92% of gemm)"));
  step.of_gemm = 1.05;
  sink.step(step, true);
  EXPECT_THAT(out.str(), ::testing::HasSubstr(
                             "(105% of gemm: the step's GEMMs outran the probe's 1024^3 GEMM)"));
}

// MoE steps in the JSONL carry the routing margin; JSON has no infinity, so a step whose
// choices left nothing out writes null (every line stays valid JSON).
TEST(Metrics, JsonlWritesTheRoutingMarginOrNull) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("metrics_moe_" + std::to_string(::getpid()) + ".jsonl");
  std::filesystem::remove(path);
  {
    config::Recipe recipe;
    recipe.logging.jsonl = path.string();
    std::ostringstream out;
    training::MetricsSink sink = logger_sink(recipe, out);
    training::StepMetrics step;
    step.iteration = 1;
    step.loss = 5.0;
    step.has_moe = true;
    step.moe_min_routing_margin = 2.5e-4;
    sink.step(step, false);
    step.iteration = 2;
    step.moe_min_routing_margin = std::numeric_limits<double>::infinity();
    sink.step(step, false);
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 3u);  // the run's opening line, then the two steps
  EXPECT_DOUBLE_EQ(lines[1].at("moe_min_routing_margin").get<double>(), 2.5e-4);
  EXPECT_TRUE(lines[2].at("moe_min_routing_margin").is_null());
}

TEST(LRSchedule, WarmupThenCosineToMin) {
  // Update k uses Megatron's schedule after k - 1 updates: the first update of a warmup has lr 0.
  optim::LRSchedule s{1.0, 0.1, 10, 110, optim::Decay::Cosine};
  EXPECT_DOUBLE_EQ(s.lr(1), 0.0);
  EXPECT_DOUBLE_EQ(s.lr(2), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(11), 1.0);
  EXPECT_NEAR(s.lr(61), 0.55, 1e-12);  // halfway: min + (max - min) / 2
  EXPECT_DOUBLE_EQ(s.lr(111), 0.1);
  EXPECT_DOUBLE_EQ(s.lr(500), 0.1);
  optim::LRSchedule lin{1.0, 0.0, 0, 100, optim::Decay::Linear};
  EXPECT_DOUBLE_EQ(lin.lr(1), 1.0);  // no warmup: the first update at max_lr
  EXPECT_NEAR(lin.lr(26), 0.75, 1e-12);
  EXPECT_FALSE(config::parse_option<config::LrDecay>("exp"));  // the recipe refuses it by name
}

TEST(Flops, MatchesMegatronFormulaByHand) {
  // GPT-2 124M at seq 1024, vocab 50304, batch 1:
  // 72 * B * s * l * h^2 * (1 + s/(6h) + V/(12 l h)) for standard MHA and 4h FFN.
  planning::FlopsModel m{12, 768, 12, 12, 64, 3072, 1024, 50304, false};
  const double h = 768, s = 1024, l = 12, V = 50304;
  const double expected = 72.0 * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
  EXPECT_NEAR(planning::megatron_flops_per_step(m, 1) / expected, 1.0, 1e-12);
  EXPECT_NEAR(planning::megatron_flops_per_step(m, 8) / expected, 8.0, 1e-12);
}

// Mixture of experts counts the active MLPs (Megatron's MoE formula): Mixtral-like, every layer
// top-2 of experts as wide as F, equals the dense model with a 2F MLP; a model whose first layer
// is dense and the others route top-6 of width f plus a shared 2f expert averages the two.
TEST(Flops, CountsTheActiveExperts) {
  const planning::FlopsModel dense{4, 512, 8, 8, 64, 2048, 256, 32000, true};
  planning::FlopsModel wide = dense;
  wide.ffn = 4096;
  config::MoeConfig mixtral;
  mixtral.num_experts = 8;
  mixtral.moe_router_topk = 2;
  EXPECT_NEAR(planning::megatron_flops_per_step(planning::with_moe(dense, mixtral), 3) /
                  planning::megatron_flops_per_step(wide, 3),
              1.0, 1e-12);
  config::MoeConfig fine;
  fine.num_experts = 64;
  fine.moe_router_topk = 6;
  fine.moe_ffn_hidden_size = 256;
  fine.moe_shared_expert_intermediate_size = 512;
  fine.moe_layer_freq.pattern = {0, 1, 1, 1};
  const planning::FlopsModel m = planning::with_moe(dense, fine);
  EXPECT_EQ(m.moe_layers, 3);
  const double active_ffn = (2048.0 * 1 + (256.0 * 6 + 512.0) * 3) / 4;
  planning::FlopsModel by_hand = dense;
  by_hand.ffn = static_cast<int64_t>(active_ffn);  // 2048: exact
  EXPECT_EQ(active_ffn, 2048.0);
  EXPECT_NEAR(
      planning::megatron_flops_per_step(m, 2) / planning::megatron_flops_per_step(by_hand, 2), 1.0,
      1e-12);
  EXPECT_EQ(planning::with_moe(dense, config::MoeConfig{}).moe_layers, 0);
}

// A learnable synthetic corpus: sample i is the sequence (i + t) mod 11 ...
class CountingSource final : public training::SampleSource {
 public:
  explicit CountingSource(int64_t S) : S_(S) {}
  int64_t seq_length() const override { return S_; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= S_; ++t) tokens[t] = static_cast<int32_t>((index * 3 + t) % 11);
  }

 private:
  int64_t S_;
};

config::Recipe tiny_recipe(int64_t micro, int64_t iters = 12) {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: 8,"
       " make_vocab_size_divisible_by: 16, hidden_dropout: 0.1, attention_dropout: 0.1}\n"
       "training: {micro_batch_size: "
    << micro << ", global_batch_size: 8, train_iters: " << iters
    << ", eval_interval: 6, eval_iters: 1, seed: 3, peak_tflops: 1.0}\n"
       "optimizer: {lr: 0.01, min_lr: 0.001, weight_decay: 0.1, schedule: {warmup_iters: 2}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "logging: {interval: 100}\n";
  return config::parse_recipe_string(y.str(), "tiny.yaml");
}

training::TrainSummary train_tiny(int64_t micro, int64_t iters = 12) {
  auto src = std::make_shared<CountingSource>(8);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(tiny_recipe(micro, iters), 11, src, src, *world, log);
  return t.run();
}

// CountingSource whose samples [8, 16), iteration 2's global batch of 8, predict nothing.
class MaskedSecondBatch final : public training::BatchSource {
 public:
  int64_t seq_length() const override { return counting_.seq_length(); }
  int64_t samples_per_epoch() const override { return counting_.samples_per_epoch(); }
  void fill(int64_t first, int64_t micro_batch_size, models::MicroBatch& mb) const override {
    training::fill_micro_batch(counting_, first, micro_batch_size, mb);
    if (first < 8 || first >= 16) return;
    int32_t* labels = mb.labels.data<int32_t>();
    std::fill(labels, labels + mb.labels.numel(), models::kIgnoreIndex);
  }

 private:
  CountingSource counting_{8};
};

// A global batch with no predicted token takes a zero-gradient step (Megatron clamps the
// token count) and the step line says so; the run goes on and learns (it used to stop with
// "the global batch has no predicted token", at the same iteration after every restart).
TEST(Trainer, AGlobalBatchWithNoTargetTakesAZeroGradientStep) {
  auto src = std::make_shared<MaskedSecondBatch>();
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  config::Recipe r = tiny_recipe(4, 6);
  r.logging.interval = 1;
  r.training.eval_iters = 0;
  r.training.eval_interval = 0;
  training::Trainer t(r, 11, src, nullptr, *world, log);
  const training::TrainSummary s = t.run();
  EXPECT_EQ(s.last_iteration, 6);
  ASSERT_EQ(s.steps.size(), 6u);
  for (const auto& m : s.steps) {
    SCOPED_TRACE(m.iteration);
    EXPECT_EQ(m.no_targets, m.iteration == 2);
    EXPECT_TRUE(std::isfinite(m.loss));
    if (m.iteration == 2) {
      EXPECT_EQ(m.loss, 0.0);
      EXPECT_EQ(m.grad_norm, 0.0);
    } else {
      EXPECT_GT(m.loss, 0.0);
    }
  }
  EXPECT_LT(s.steps.back().loss, s.steps.front().loss);
  EXPECT_THAT(log.str(), ::testing::HasSubstr(
                             "| no predicted token in the global batch: zero-gradient step\n"));
}

// A run that cannot fit is refused before anything is allocated, naming what sizes it (the
// planner's memory model against the host's available memory); before, a micro-batch of 1e9
// died allocating 512 GB deep in the model.
TEST(Trainer, RefusesARunThatCannotFitBeforeAllocating) {
  config::Recipe r = tiny_recipe(1, 2);
  r.training.micro_batch_size = r.training.global_batch_size = 1000000000;
  auto src = std::make_shared<CountingSource>(8);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  try {
    training::Trainer t(r, 11, src, src, *world, log);
    ADD_FAILURE() << "built a trainer for a micro-batch of 1e9";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.micro_batch_size (1000000000)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Trainer, DeterministicForASeed) {
  const auto a = train_tiny(4), b = train_tiny(4);
  ASSERT_EQ(a.steps.size(), 12u);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i;
    EXPECT_EQ(a.steps[i].grad_norm, b.steps[i].grad_norm) << "step " << i;
  }
}

TEST(Trainer, MicroBatchSizeDoesNotChangeTheCurve) {
  // Same global batch (8) as 1x8, 2x4 and 8x1 micro-batches: gradient accumulation and the
  // layout-independent dropout masks give the same losses up to fp32 summation order.
  const auto whole = train_tiny(8), halves = train_tiny(4), singles = train_tiny(1);
  for (size_t i = 0; i < whole.steps.size(); ++i) {
    EXPECT_NEAR(halves.steps[i].loss, whole.steps[i].loss, 2e-5 * whole.steps[i].loss) << i;
    EXPECT_NEAR(singles.steps[i].loss, whole.steps[i].loss, 2e-5 * whole.steps[i].loss) << i;
  }
}

TEST(Trainer, LearnsASimplePattern) {
  const auto s = train_tiny(4, 40);
  ASSERT_GE(s.evals.size(), 2u);
  EXPECT_LT(s.evals.back().loss, 0.5 * s.evals.front().loss);
  EXPECT_EQ(s.evals.front().iteration, 0);
}

}  // namespace
}  // namespace megatron
