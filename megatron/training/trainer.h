#pragma once
// The training loop: micro-batches with gradient accumulation, gradient clipping by the global
// norm, AdamW with the LR schedule, periodic validation, per-step metrics (metrics.h) and
// checkpoints (checkpointer.h).
//
// The constructor builds, in this order: the process groups (checked against the recipe), the
// model (this rank's chunks, models/registry.h), the data feed, the pipeline schedule (every
// layout runs through the pipeline runtime; no pipelining is one stage), the optimizer, the
// checkpointer and the metrics sink. training.recompute (none|selective|full) selects
// activation recomputation in the transformer blocks; every model chunk of a rank shares one
// workspace.
#include <chrono>
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/optimizer/grad_sync.h"
#include "megatron/optimizer/loss_scaler.h"
#include "megatron/optimizer/lr_schedule.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/pipeline/timeline.h"
#include "megatron/training/batch_feeder.h"
#include "megatron/training/batch_source.h"
#include "megatron/training/checkpointer.h"
#include "megatron/training/compute_peak.h"
#include "megatron/training/evaluator.h"
#include "megatron/training/gradient_sync.h"
#include "megatron/training/groups.h"
#include "megatron/training/local_checkpoints.h"
#include "megatron/training/metrics.h"
#include "megatron/training/pipeline_runtime.h"
#include "megatron/training/rerun.h"
#include "megatron/training/step_profile.h"
#include "models/registry.h"

namespace megatron::training {

struct TrainSummary {
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;
  int64_t start_iteration = 0;  // resumed from this checkpoint iteration (0: fresh)
  int64_t last_iteration = 0;
  bool stopped_early = false;               // signal or training.exit_duration_minutes
  std::vector<StragglerReport> stragglers;  // logging.straggler_interval's (world rank 0 only)
  std::vector<std::string> reruns;          // training.rerun_mode's verdicts (every rank)
};

class Trainer {
 public:
  // `log` receives the human-readable lines (stdout in the tool, a string stream in tests);
  // only world rank 0 writes to it and to the JSONL file.
  Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
          std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
          TrainerGroups groups, std::ostream& log);
  // Single process.
  Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
          std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
          parallel::Communicator& world, std::ostream& log);
  ~Trainer();

  // Resumes from a checkpoint when one is configured or present in checkpoint.save, then
  // trains to recipe.training.train_iters with evaluation at step 0, every eval_interval and
  // at the end; saves every checkpoint.save_interval steps, at the end, and early (then
  // returning) on SIGTERM/SIGUSR1 or after training.exit_duration_minutes.
  TrainSummary run();
  void save_checkpoint(int64_t iteration);
  // Loads the configured checkpoint; returns the iteration to continue after (0 if none).
  int64_t load_checkpoint();
  StepMetrics train_step(int64_t iteration);  // iteration is 1-based
  EvalMetrics evaluate(int64_t iteration);

  ParamStore& params() { return store_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  ParamStore& store() { return store_; }
  const optim::LossScaler& loss_scaler() const { return *scaler_; }
  const models::Model& model() const { return *model_.chunks.front(); }
  // This rank's action list of the step's pipeline schedule.
  const std::vector<pipeline::Action>& schedule_actions() const { return schedule_actions_; }
  double flops_per_step() const { return flops_per_step_; }
  double peak_flops() const { return peak_.peak_flops; }
  const ComputePeak& compute_peak() const { return peak_; }
  Device device() const { return device_; }

 private:
  // The construction steps, in order.
  void check_groups(TrainerGroups groups);
  void build_model(int64_t tokenizer_vocab);
  void build_schedule();
  pipeline::Schedule schedule_for(pipeline::ScheduleKind kind, int pp, int vpp) const;
  // The V placement (zb_v, dualpipe_v): stage 0 holds the first and the last virtual stage (one
  // tied table).
  bool v_placement() const { return recipe_.parallel.v_placement(); }
  void build_optimizer();
  void build_logging(std::ostream& log);
  void report_start();
  // One training step, in order (train_step).
  struct StepBatch {
    double lm_targets = 0, aux_targets = 0, lm_divisor = 1, scale = 1;
    models::LossWeights weights;
  };
  StepBatch prepare_batch(int64_t iteration);
  models::LossSums run_micro_batches(const StepBatch& batch);
  StepMetrics step_losses(int64_t iteration, const models::LossSums& sums, const StepBatch& batch);
  // The step's compute (run_micro_batches) with training.error_injection_* applied.
  models::LossSums compute_step(const StepBatch& batch, int64_t iteration, bool rerun);
  // The global gradient norm (metrics.grad_norm; the scaled one kept for apply_update).
  void measure_grad_norm(StepMetrics& metrics);
  // training.rerun_mode: a suspicious step is re-run and judged (rerun.h); may replace metrics
  // with the re-run's, mark the batch skipped, or throw to stop the run.
  void validate_step(int64_t iteration, const StepBatch& batch, const models::LossSums& sums,
                     StepMetrics& metrics);
  void apply_update(StepMetrics& metrics);
  void time_step(StepMetrics& metrics, std::chrono::steady_clock::time_point start);
  // The agreed reason to stop early (a signal on any rank, the time limit), or empty.
  std::string should_stop(double elapsed_minutes);
  // logging.straggler_interval: adds the step's split; every interval, the collective report.
  void track_stragglers(const StepMetrics& m, TrainSummary& summary);
  StepSplit straggler_sum_;
  int64_t straggler_steps_ = 0;
  std::unique_ptr<StepRerun> rerun_;  // training.rerun_mode, error injection
  double scaled_grad_norm_ = 0;       // measure_grad_norm's, for apply_update
  std::vector<std::string> rerun_reports_;

  config::Recipe recipe_;
  std::shared_ptr<const BatchSource> train_, valid_;
  std::unique_ptr<parallel::Communicator> single_;  // groups of one when none are given
  std::unique_ptr<TimedGroups> timed_;              // the groups behind communication timers
  TrainerGroups groups_;
  TrainerGroups replicas_;  // groups_.weight_replicas(): reductions over dp x cp
  Device device_ = Device::CPU;
  ParamStore store_;
  models::ModelChunks model_;  // this rank's virtual stages
  std::unique_ptr<BatchFeeder> feeder_;
  std::unique_ptr<PipelineRuntime> pipeline_;
  std::vector<pipeline::Action> schedule_actions_;
  std::unique_ptr<pipeline::TimelineRecorder> timeline_;
  std::unique_ptr<StepProfile> profile_;     // logging.profile
  std::unique_ptr<GradientSync> grad_sync_;  // dp (and, MoE, expert dp) gradient reductions
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::LRSchedule schedule_;
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<LocalCheckpoints> local_;  // checkpoint.local_interval
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<MetricsSink> metrics_;
  std::vector<models::MicroBatch> batches_;         // this step's micro-batches (host)
  std::vector<models::MicroBatch> device_batches_;  // the same on the training device
  Tensor sp_grad_scratch_;
  int64_t num_micro_ = 1;
  double flops_per_step_ = 0;
  // Samples consumed before iteration i = sample_offset_ + i * global_batch_size: 0 unless a run
  // resumed with another global batch size (then the checkpoint's consumed_samples rules, as in
  // Megatron: no sample is skipped or repeated).
  int64_t sample_offset_ = 0;
  ComputePeak peak_;
};

}  // namespace megatron::training
