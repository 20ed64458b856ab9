// Trainer checkpoints: stopping at step N and resuming reproduces the uninterrupted run bit
// for bit (data order, dropout, LR schedule, Adam state, fp16 loss scale), auto-resume from
// checkpoint.save, early stop on a wall-clock budget, fine-tuning from weights, and clear
// errors for checkpoints of another model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <csignal>
#include <filesystem>
#include <sstream>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/save_lock.h"
#include "megatron/training/signals.h"
#include "megatron/training/trainer.h"

namespace megatron {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PatternSource final : public training::SampleSource {
 public:
  int64_t seq_length() const override { return 8; }
  int64_t samples_per_epoch() const override { return 1000; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= 8; ++t)
      tokens[t] = static_cast<int32_t>((index * 7 + t * 3 + (index % 3) * t * t) % 17);
  }
};

struct RunSpec {
  RunSpec(std::string precision_, int64_t iters_, int64_t layers_ = 2, int64_t hidden_ = 32,
          std::string save_ = "", std::string load_ = "")
      : precision(std::move(precision_)),
        iters(iters_),
        layers(layers_),
        hidden(hidden_),
        save(std::move(save_)),
        load(std::move(load_)) {}
  std::string precision;
  int64_t iters, layers, hidden;
  std::string save, load, extra;
  std::string checkpoint_extra;  // more checkpoint keys, e.g. ", async_save: true"
  std::string model_extra;       // more model keys, e.g. ", vocab_size: 40"
  std::string extra_sections;    // replaces the logging section (a whole "logging: {...}\n")
  int64_t vocab_divisible = 16;
  int64_t global_batch = 4;
  std::string* log_out = nullptr;  // receives the trainer's log
};

training::TrainSummary train(const RunSpec& r) {
  std::ostringstream y;
  y << "model: {num_layers: " << r.layers << ", hidden_size: " << r.hidden
    << ", num_attention_heads: 4, seq_length: 8, make_vocab_size_divisible_by: "
    << r.vocab_divisible
    << ","
       " hidden_dropout: 0.1, attention_dropout: 0.1"
    << r.model_extra
    << "}\n"
       "training: {micro_batch_size: 2, global_batch_size: "
    << r.global_batch << ", train_iters: " << r.iters
    << ", eval_interval: 5, eval_iters: 1, seed: 11, peak_tflops: 1.0, precision: " << r.precision
    << ", initial_loss_scale: 1048576, loss_scale_window: 3" << r.extra
    << "}\n"
       "optimizer: {lr: 0.01, min_lr: 0.001, schedule: {warmup_iters: 2, decay_iters: 10}}\n"
       "data: {tokenizer: {type: ByteTokenizer}, train: [{path: unused}]}\n"
       "checkpoint: {save: "
    << (r.save.empty() ? "null" : r.save) << ", load: " << (r.load.empty() ? "null" : r.load)
    << ", keep_last: 2" << r.checkpoint_extra << "}\n"
    << (r.extra_sections.empty() ? "logging: {interval: 1000}\n" : r.extra_sections);
  auto src = std::make_shared<PatternSource>();
  auto world = parallel::make_single_process_communicator();
  std::ostringstream log;
  training::Trainer t(config::parse_recipe_string(y.str(), "resume.yaml"), 17, src, src, *world,
                      log);
  auto summary = t.run();
  if (r.log_out) *r.log_out = log.str();
  return summary;
}

// The message of the InputError a run must stop with; a test failure naming `why` if it trains.
std::string input_error_of(const RunSpec& r, const std::string& why) {
  try {
    train(r);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << why;
  return "";
}

class CheckpointResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megatron_resume_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

void expect_identical_tail(const training::TrainSummary& resumed,
                           const training::TrainSummary& full, int64_t from) {
  ASSERT_EQ(resumed.start_iteration, from);
  ASSERT_EQ(static_cast<int64_t>(resumed.steps.size()),
            static_cast<int64_t>(full.steps.size()) - from);
  for (size_t i = 0; i < resumed.steps.size(); ++i) {
    const auto& want = full.steps[static_cast<size_t>(from) + i];
    EXPECT_EQ(resumed.steps[i].iteration, want.iteration);
    EXPECT_EQ(resumed.steps[i].loss, want.loss) << "iteration " << want.iteration;
    // Bitwise: a skipped fp16 step reports a NaN norm, and NaN must match NaN.
    EXPECT_EQ(std::bit_cast<uint64_t>(resumed.steps[i].grad_norm),
              std::bit_cast<uint64_t>(want.grad_norm))
        << "iteration " << want.iteration << ": " << resumed.steps[i].grad_norm << " vs "
        << want.grad_norm;
    EXPECT_EQ(resumed.steps[i].loss_scale, want.loss_scale) << "iteration " << want.iteration;
  }
}

TEST_F(CheckpointResume, ResumeIsBitExact) {
  for (const char* precision : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    fs::remove_all(dir_);
    const auto full = train(RunSpec(precision, 10));
    const auto first = train(RunSpec(precision, 5, 2, 32, dir()));
    EXPECT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(5));
    for (size_t i = 0; i < first.steps.size(); ++i)
      EXPECT_EQ(first.steps[i].loss, full.steps[i].loss);
    // Explicit load of that checkpoint, and auto-resume from checkpoint.save.
    expect_identical_tail(train(RunSpec(precision, 10, 2, 32, "", dir())), full, 5);
    expect_identical_tail(train(RunSpec(precision, 10, 2, 32, dir())), full, 5);
    EXPECT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(10));
  }
}

// checkpoint.async_save: each save is copied to host memory and written in the background; the
// log says so at the save and reports it saved only once committed (after the next steps, or at
// the end); keep_last applies; resuming from the newest is bit-exact with the uninterrupted run.
TEST_F(CheckpointResume, AsyncSaveIsReportedWhenDurableAndResumesBitExactly) {
  const auto full = train(RunSpec("fp32", 10));
  RunSpec first("fp32", 6, 2, 32, dir());
  first.checkpoint_extra = ", save_interval: 2, async_save: true";
  std::string log;
  first.log_out = &log;
  train(first);
  EXPECT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(6));
  EXPECT_FALSE(fs::exists(dir_ / "iter_0000002"));  // keep_last 2
  EXPECT_TRUE(fs::exists(dir_ / "iter_0000004"));
  for (int it : {2, 4, 6}) {
    const std::string path = (dir_ / concat("iter_000000", it)).string();
    const size_t started = log.find(concat("checkpoint iteration ", it, ": copied to host memory"));
    const size_t saved = log.find("saved checkpoint " + path + " (written in the background in ");
    ASSERT_NE(started, std::string::npos) << log;
    ASSERT_NE(saved, std::string::npos) << log;
    EXPECT_LT(started, saved) << log;
  }
  expect_identical_tail(train(RunSpec("fp32", 10, 2, 32, dir())), full, 6);
}

// checkpoint.load may name an iteration directory (e.g. an older one than `latest`) and resumes
// from it exactly as from its parent.
// Another run holding checkpoint.save (here a lock taken the way a run takes it: flock on
// DIR/.lock, which conflicts between open files even in one process): the run stops at start
// naming the directory and the holder; once the holder is gone the run trains and saves.
TEST_F(CheckpointResume, TwoRunsCannotShareASaveDirectory) {
  {
    checkpoint::SaveDirLock other(dir());
    const std::string err =
        input_error_of(RunSpec("fp32", 2, 2, 32, dir()), "trained into a locked directory");
    EXPECT_THAT(err, HasSubstr("checkpoint.save: '" + dir() + "' is in use by another run"));
    EXPECT_THAT(err, HasSubstr("pid " + std::to_string(::getpid())));
    EXPECT_FALSE(checkpoint::latest_iteration(dir()).has_value());
  }
  EXPECT_EQ(train(RunSpec("fp32", 2, 2, 32, dir())).last_iteration, 2);
  EXPECT_EQ(checkpoint::latest_iteration(dir()), 2);
}

TEST_F(CheckpointResume, LoadNamesAnIterationDirectory) {
  const auto full = train(RunSpec("fp32", 8));
  train(RunSpec("fp32", 4, 2, 32, dir()));  // saves iter_0000004 at exit
  train(RunSpec("fp32", 6, 2, 32, dir()));  // resumes, saves iter_0000006
  ASSERT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(6));
  expect_identical_tail(train(RunSpec("fp32", 8, 2, 32, "", dir() + "/iter_0000004")), full, 4);
}

// Resuming with another global batch size continues the data after the checkpoint's consumed
// samples (Megatron's semantics), neither skipping nor repeating any.
TEST_F(CheckpointResume, AnotherGlobalBatchSizeResumesFromConsumedSamples) {
  train(RunSpec("fp32", 4, 2, 32, dir()));  // 4 iterations x 4 samples
  RunSpec bigger("fp32", 6, 2, 32, dir());
  bigger.global_batch = 8;
  const auto resumed = train(bigger);  // iterations 5 and 6 with 8 samples each
  ASSERT_EQ(resumed.start_iteration, 4);
  const auto index = checkpoint::read_index(dir());
  ASSERT_EQ(index.iteration, 6);
  EXPECT_EQ(index.metadata["consumed_samples"].get<int64_t>(), 16 + 2 * 8);
  EXPECT_EQ(index.metadata["data"]["consumed_samples"].get<int64_t>(), 16 + 2 * 8);
}

// When `latest` names a checkpoint that is incomplete (here its metadata.json is gone), the run
// resumes from the newest complete one and says which one it skipped and why.
TEST_F(CheckpointResume, FallingBackToAnOlderCheckpointIsAWarning) {
  train(RunSpec("fp32", 4, 2, 32, dir()));
  train(RunSpec("fp32", 6, 2, 32, dir()));
  fs::remove(fs::path(dir()) / "iter_0000006" / "metadata.json");
  std::string log;
  RunSpec resume("fp32", 8, 2, 32, "", dir());  // load only: no new save
  resume.log_out = &log;
  EXPECT_EQ(train(resume).start_iteration, 4);
  EXPECT_THAT(log,
              HasSubstr("warning: " + dir() + "/latest names iter_0000006, which is incomplete"));
  fs::create_directory(fs::path(dir()) / "iter_0000007");  // a save killed before its metadata
  log.clear();
  EXPECT_EQ(train(resume).start_iteration, 4);
  EXPECT_THAT(log, HasSubstr("iter_0000007 is incomplete"));
  EXPECT_THAT(log, HasSubstr("loading " + dir() + "/iter_0000004 instead"));
}

TEST_F(CheckpointResume, WallClockBudgetStopsSavesAndResumes) {
  const auto full = train(RunSpec("fp32", 10));
  RunSpec r("fp32", 10, 2, 32, dir());
  r.extra = ", exit_duration_minutes: 1.0e-9";
  const auto stopped = train(r);
  EXPECT_TRUE(stopped.stopped_early);
  EXPECT_EQ(stopped.last_iteration, 1);
  EXPECT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(1));
  expect_identical_tail(train(RunSpec("fp32", 10, 2, 32, dir())), full, 1);
}

TEST_F(CheckpointResume, SignalStopsAtTheNextStep) {
  training::install_exit_signal_handlers();
  std::raise(SIGUSR1);
  const auto stopped = train(RunSpec("fp32", 10, 2, 32, dir()));
  training::reset_exit_signal();
  EXPECT_TRUE(stopped.stopped_early);
  EXPECT_EQ(stopped.last_iteration, 1);
  EXPECT_EQ(checkpoint::latest_iteration(dir()), std::optional<int64_t>(1));
}

// The handlers run on alternate stacks, in this thread and in every OpenMP worker: on the
// interrupted code's own stack their frame overwrote what JIT-compiled GEMM kernels keep below
// the stack pointer (a SIGTERM mid-GEMM corrupted the heap). SIGINT and SIGHUP stop like
// SIGTERM, and the stop names the signal.
TEST_F(CheckpointResume, ExitSignalsRunOnAlternateStacks) {
  // The workers of the thread count in use when training starts (the trainer sets it first).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  training::install_exit_signal_handlers();
  for (int sig : {SIGTERM, SIGUSR1, SIGINT, SIGHUP}) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    EXPECT_TRUE(current.sa_flags & SA_ONSTACK) << "signal " << sig;
  }
  int threads_without = 0;
#pragma omp parallel reduction(+ : threads_without)
  {
    stack_t ss{};
    sigaltstack(nullptr, &ss);
    threads_without += (ss.ss_flags & SS_DISABLE) ? 1 : 0;
  }
  omp_set_num_threads(threads);
  EXPECT_EQ(threads_without, 0);
  std::raise(SIGHUP);
  EXPECT_EQ(training::exit_signal_number(), SIGHUP);
  std::string log;
  RunSpec spec("fp32", 10, 2, 32, dir());
  spec.log_out = &log;
  const auto stopped = train(spec);
  training::reset_exit_signal();
  EXPECT_TRUE(stopped.stopped_early);
  EXPECT_EQ(stopped.last_iteration, 1);
  EXPECT_THAT(log, HasSubstr("stopping at iteration 1 (SIGHUP received)"));
}

// A run whose checkpoint is already at train_iters says so instead of exiting in silence; a
// JSONL log that cannot be written (a full disk) stops the run naming the key and file.
TEST_F(CheckpointResume, NothingToTrainAndUnwritableLogsAreReported) {
  train(RunSpec("fp32", 3, 2, 32, dir()));
  std::string log;
  RunSpec again("fp32", 3, 2, 32, dir());
  again.log_out = &log;
  EXPECT_EQ(train(again).steps.size(), 0u);
  EXPECT_THAT(log, HasSubstr("nothing to train: the checkpoint is at iteration 3, "
                             "training.train_iters is 3"));
  RunSpec full_disk("fp32", 2);
  full_disk.extra_sections = "logging: {interval: 1000, jsonl: /dev/full}\n";
  EXPECT_THAT(input_error_of(full_disk, "trained with an unwritable log"),
              HasSubstr("logging.jsonl: writing '/dev/full' failed"));
}

TEST_F(CheckpointResume, FinetuneLoadsWeightsOnly) {
  train(RunSpec("fp32", 5, 2, 32, dir()));
  // finetune is a checkpoint key, written after load in the generated recipe.
  const auto tuned = train(RunSpec("fp32", 3, 2, 32, "", dir() + ", finetune: true"));
  EXPECT_EQ(tuned.start_iteration, 0);
  ASSERT_EQ(tuned.steps.size(), 3u);
  // Starting from trained weights, the first loss is below a fresh model's.
  const auto fresh = train(RunSpec("fp32", 3));
  EXPECT_LT(tuned.steps.front().loss, fresh.steps.front().loss);
}

// checkpoint.pretrained (Megatron's --pretrained-checkpoint): weights only while the run has no
// checkpoint of its own; once it saved, a restart resumes its own checkpoint (bit for bit the
// uninterrupted fine-tune), never the pretrained one again.
TEST_F(CheckpointResume, PretrainedIsIgnoredOnceTheRunSaved) {
  const std::string base = dir() + "/base", tuned = dir() + "/tuned", other = dir() + "/other";
  train(RunSpec("fp32", 5, 2, 32, base));
  auto finetune = [&](int64_t iters, const std::string& save) {
    // save and load the same directory, as a requeued job does.
    RunSpec r("fp32", iters, 2, 32, save, save + ", pretrained: " + base);
    std::string log;
    r.log_out = &log;
    auto summary = train(r);
    return std::make_pair(summary, log);
  };
  const auto [full, full_log] = finetune(6, other);  // uninterrupted
  EXPECT_EQ(full.start_iteration, 0);
  EXPECT_THAT(full_log, HasSubstr("(weights only)"));
  EXPECT_THAT(full_log, HasSubstr(base));
  const auto fresh = train(RunSpec("fp32", 6));
  EXPECT_LT(full.steps.front().loss, fresh.steps.front().loss);  // it did start from base

  const auto [first, first_log] = finetune(3, tuned);  // interrupted after 3 steps
  EXPECT_EQ(first.start_iteration, 0);
  ASSERT_EQ(first.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(first.steps[i].loss, full.steps[i].loss);
  const auto [resumed, resumed_log] = finetune(6, tuned);  // the restart
  EXPECT_THAT(resumed_log, ::testing::Not(HasSubstr("(weights only)")));
  expect_identical_tail(resumed, full, 3);

  // A missing pretrained directory, and finetune with pretrained, are errors.
  RunSpec missing("fp32", 2, 2, 32, "", "null, pretrained: " + dir() + "/nowhere");
  EXPECT_THAT(input_error_of(missing, "a missing checkpoint.pretrained must fail"),
              HasSubstr("checkpoint.pretrained: '" + dir() + "/nowhere' is not a directory"));
  RunSpec both("fp32", 2, 2, 32, "", base + ", finetune: true, pretrained: " + base);
  EXPECT_THAT(input_error_of(both, "finetune with pretrained must fail"),
              HasSubstr("checkpoint.finetune"));
}

TEST_F(CheckpointResume, AnotherModelShapeIsAClearError) {
  train(RunSpec("fp32", 2, 2, 32, dir()));
  {
    const std::string error =
        input_error_of(RunSpec("fp32", 4, 2, 64, "", dir()),
                       "loading a hidden-32 checkpoint into a hidden-64 model must fail");
    EXPECT_THAT(error, HasSubstr("iter_0000002"));
    EXPECT_THAT(error, HasSubstr("[32, 32]"));  // names both shapes
    EXPECT_THAT(error, HasSubstr("[32, 64]"));
  }
  {
    const std::string error =
        input_error_of(RunSpec("fp32", 4, 3, 32, "", dir()),
                       "a 3-layer model needs layers.2.* which the checkpoint lacks");
    EXPECT_THAT(error, HasSubstr("layers.2"));
  }
}

// Strict by default: a checkpoint with tensors the model does not have (a 2-layer checkpoint
// loaded into a 1-layer model) is an error listing them, as is one lacking tensors the model
// needs (listing every one); checkpoint.strict: false loads what matches and names the rest.
TEST_F(CheckpointResume, UnexpectedAndMissingTensorsAreListedUnlessStrictIsOff) {
  train(RunSpec("fp32", 2, 2, 32, dir()));
  {
    const std::string error =
        input_error_of(RunSpec("fp32", 4, 1, 32, "", dir()),
                       "layers.1.* of the checkpoint must not be dropped in silence");
    EXPECT_THAT(error, HasSubstr("not part of this model"));
    EXPECT_THAT(error, HasSubstr("model/layers.1."));
    EXPECT_THAT(error, ::testing::Not(HasSubstr("model/layers.0.")));
  }
  {
    const std::string error = input_error_of(RunSpec("fp32", 4, 4, 32, "", dir()),
                                             "layers.2.* and layers.3.* are not in the checkpoint");
    EXPECT_THAT(error, HasSubstr("has no tensor for"));
    EXPECT_THAT(error, HasSubstr("layers.2."));
    EXPECT_THAT(error, HasSubstr("layers.3."));
  }
  // Partial loads on request: the shallower model takes layer 0 (and the embeddings), the
  // deeper one keeps its initial layers 2-3; both train from there.
  RunSpec shallower("fp32", 4, 1, 32, "", dir() + ", strict: false");
  EXPECT_EQ(train(shallower).steps.size(), 2u);
  RunSpec deeper("fp32", 4, 4, 32, "", dir() + ", strict: false");
  EXPECT_EQ(train(deeper).steps.size(), 2u);
}

// Vocabulary tables may differ in their padding rows only (another make_vocab_size_divisible_by
// or tp size); a different vocabulary or a longer learned position table is an error naming the
// tensor and both shapes, never a partial load that trains on.
TEST_F(CheckpointResume, OnlyVocabularyPaddingRowsMayDiffer) {
  train(RunSpec("fp32", 2, 2, 32, dir()));  // vocabulary 17, padded to 32
  RunSpec repadded("fp32", 3, 2, 32, "", dir());
  repadded.vocab_divisible = 8;  // 17 padded to 24: the same 17 real rows
  EXPECT_EQ(train(repadded).steps.size(), 1u);

  RunSpec bigger_vocab("fp32", 3, 2, 32, "", dir());
  bigger_vocab.model_extra = ", vocab_size: 40";  // padded to 48
  {
    const std::string error = input_error_of(
        bigger_vocab, "a vocabulary-17 checkpoint must not load into a vocabulary-40 model");
    EXPECT_THAT(error, HasSubstr("word_embeddings"));
    EXPECT_THAT(error, HasSubstr("[32, 32]"));
    EXPECT_THAT(error, HasSubstr("[48, 32]"));
    EXPECT_THAT(error, HasSubstr("vocabulary is 17, this model's 40"));
  }
  RunSpec longer_positions("fp32", 3, 2, 32, "", dir());
  longer_positions.model_extra = ", max_position_embeddings: 16";
  {
    const std::string error = input_error_of(
        longer_positions, "an 8-position table must not load into a 16-position one");
    EXPECT_THAT(error, HasSubstr("position"));
    EXPECT_THAT(error, HasSubstr("[8, 32]"));
    EXPECT_THAT(error, HasSubstr("[16, 32]"));
  }
}

}  // namespace
}  // namespace megatron
