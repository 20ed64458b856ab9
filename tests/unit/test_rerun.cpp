// Re-running suspicious steps (training.rerun_mode, megatron/training/rerun.h) in a real single
// process run, with faults injected on purpose (training.error_injection_*): a transient fault is
// re-run, reported as such and training continues exactly as a run without it; a repeated one
// stops the run naming its samples and data, or skips the batch when asked; report mode only
// reports; with re-runs disabled a fault stops the run as before. Spike detection against the
// recent losses.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <sstream>
#include <string>

#include "megatron/core/error.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/rerun.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

constexpr int64_t kVocab = 64, kSeq = 16;

training::TrainSummary train(const std::string& training_extra, std::string* log_out = nullptr) {
  std::ostringstream y;
  y << "model: {num_layers: 2, hidden_size: 32, num_attention_heads: 4, seq_length: " << kSeq
    << ", vocab_size: " << kVocab << ", make_vocab_size_divisible_by: 16, hidden_dropout: 0.1,"
    << " attention_dropout: 0.1}\n"
    << "training: {micro_batch_size: 2, global_batch_size: 4, train_iters: 6, seed: 3,"
    << " peak_tflops: 1.0" << training_extra << "}\n"
    << "optimizer: {lr: 0.01, schedule: {warmup_iters: 1}}\n"
    << "data: {mock: true, tokenizer: {type: NullTokenizer, vocab_size: " << kVocab << "}}\n"
    << "logging: {interval: 1000}\n";
  auto src = std::make_shared<training::MockTokenSource>(kSeq, kVocab, 5);
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(config::parse_recipe_string(y.str(), "rerun.yaml"), kVocab, src, nullptr,
                      *world, log);
  training::TrainSummary s;
  try {
    s = t.run();
  } catch (...) {
    if (log_out) *log_out = log.str();
    throw;
  }
  if (log_out) *log_out = log.str();
  return s;
}

const std::string kValidate = ", rerun_mode: validate, error_injection_iteration: 3";

TEST(Rerun, TransientFaultIsRerunAndTrainingContinuesExactly) {
  const auto clean = train(", rerun_mode: validate");
  std::string log;
  const auto hit = train(kValidate + ", error_injection_type: transient_error", &log);
  EXPECT_NE(log.find("iteration 3: non-finite loss nan; re-run on the same data gave loss"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("a transient fault, not the data; the results of rank(s) 0 differed"),
            std::string::npos)
      << log;
  ASSERT_EQ(hit.steps.size(), clean.steps.size());
  for (size_t i = 0; i < clean.steps.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint64_t>(hit.steps[i].loss),
              std::bit_cast<uint64_t>(clean.steps[i].loss))
        << "step " << i + 1;
    EXPECT_EQ(hit.steps[i].grad_norm, clean.steps[i].grad_norm) << "step " << i + 1;
  }
}

TEST(Rerun, RepeatedFaultStopsNamingTheSamples) {
  std::string log;
  try {
    train(kValidate + ", error_injection_type: persistent_error", &log);
    FAIL() << "the run went on";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("iteration 3: non-finite loss nan; re-run on the same data repeated it bit "
                        "for bit"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("global samples 8-11 of the training data (data.train: mock)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("training.rerun_skip_batch"), std::string::npos) << what;
  }
}

TEST(Rerun, RepeatedFaultSkipsTheBatchWhenAsked) {
  std::string log;
  const auto s =
      train(kValidate + ", error_injection_type: persistent_error, rerun_skip_batch: true", &log);
  ASSERT_EQ(s.steps.size(), 6u);
  EXPECT_TRUE(s.steps[2].skipped);
  EXPECT_TRUE(s.steps[2].rerun_skipped);
  for (size_t i = 3; i < 6; ++i) EXPECT_TRUE(std::isfinite(s.steps[i].loss)) << "step " << i + 1;
  EXPECT_NE(log.find("the batch is skipped"), std::string::npos) << log;
}

TEST(Rerun, ReportModeReportsThenTheNonFiniteLossStopsAsBefore) {
  std::string log;
  EXPECT_THROW(train(", rerun_mode: report, error_injection_iteration: 2, error_injection_type: "
                     "persistent_error",
                     &log),
               Error);
  EXPECT_NE(log.find("iteration 2: non-finite loss nan; re-run on the same data repeated it"),
            std::string::npos)
      << log;
}

TEST(Rerun, DisabledLeavesAFaultToStopTheRun) {
  try {
    train(", error_injection_iteration: 2, error_injection_type: transient_error");
    FAIL() << "the run went on";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iteration 2: non-finite loss"), std::string::npos)
        << e.what();
  }
}

TEST(Rerun, SpikesAreMeasuredAgainstTheRecentLosses) {
  config::Recipe r = config::parse_recipe_string(
      "model: {num_layers: 1, hidden_size: 8, num_attention_heads: 1, seq_length: 4, vocab_size: "
      "8}\ntraining: {micro_batch_size: 1, global_batch_size: 1, train_iters: 1, rerun_mode: "
      "validate, rerun_spike_factor: 4}\noptimizer: {lr: 0.1}\ndata: {mock: true, tokenizer: "
      "{type: NullTokenizer, vocab_size: 8}}\n",
      "spike.yaml");
  auto world = parallel::make_single_process_communicator();
  training::StepRerun rerun(r, *world);
  EXPECT_EQ(rerun.suspicious(50.0, 1.0), "");  // no history yet
  for (double l : {3.0, 2.8, 2.6}) rerun.accept(l);
  EXPECT_EQ(rerun.suspicious(10.0, 1.0), "");
  EXPECT_NE(rerun.suspicious(11.5, 1.0).find("above 4 x the mean 2.8"), std::string::npos)
      << rerun.suspicious(11.5, 1.0);
  EXPECT_NE(rerun.suspicious(1.0, INFINITY).find("non-finite gradient norm"), std::string::npos);
  // An injection rank outside the run is refused by name.
  r.training.error_injection_type = config::ErrorInjection::Transient;
  r.training.error_injection_iteration = 1;
  r.training.error_injection_rank = 3;
  try {
    training::StepRerun bad(r, *world);
    FAIL() << "rank 3 of 1 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("training.error_injection_rank 3"), std::string::npos);
  }
}

}  // namespace
}  // namespace megatron
