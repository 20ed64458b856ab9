#include "megatron/training/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>

#include "megatron/backend/ops.h"
#include "megatron/core/format.h"
#include "megatron/pipeline/zero_bubble.h"
#include "megatron/planning/flops.h"
#include "megatron/training/grad_reductions.h"
#include "megatron/training/memory_check.h"
#include "megatron/training/moe_step.h"
#include "megatron/training/signals.h"

namespace megatron::training {

Trainer::Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
                 std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
                 parallel::Communicator& world, std::ostream& log)
    : Trainer(recipe, tokenizer_vocab, std::move(train), std::move(valid),
              TrainerGroups{&world, nullptr, nullptr}, log) {}

namespace {

// What runs on the CPU backend only so far, refused here rather than by the recipe check so that
// the planner can size it for GPU clusters.
void refuse_cpu_only_features(const config::Recipe& r) {
  if (r.training.device == config::TrainingDevice::CPU) return;
  // The split-backward schedules post sends that are waited for later (buffered): over NCCL
  // that needs a send stream of their own, not written yet.
  MT_INPUT_CHECK(!r.parallel.splits_backward(), r.source_path, ": parallel.pipeline_schedule: ",
                 config::option_name(r.parallel.pipeline_schedule_kind()),
                 " runs on the CPU backend only so far (training.device: cpu)");
  // The compressions pack and unpack on the host.
  MT_INPUT_CHECK(r.parallel.grad_compression == config::GradCompression::None, r.source_path,
                 ": parallel.grad_compression: topk runs on the CPU backend only so far "
                 "(training.device: cpu)");
  MT_INPUT_CHECK(r.optimizer.type != config::OptimizerType::OnebitAdam, r.source_path,
                 ": optimizer.type: onebit_adam runs on the CPU backend only so far "
                 "(training.device: cpu)");
  MT_INPUT_CHECK(!r.parallel.zero_quantized_weights && !r.parallel.zero_quantized_gradients,
                 r.source_path,
                 ": parallel.zero_quantized_weights / zero_quantized_gradients run on the CPU "
                 "backend only so far (training.device: cpu)");
}

pipeline::ScheduleKind schedule_kind(config::PipelineSchedule s) {
  switch (s) {
    case config::PipelineSchedule::Interleaved:
      return pipeline::ScheduleKind::Interleaved;
    case config::PipelineSchedule::ZbH1:
      return pipeline::ScheduleKind::ZeroBubbleH1;
    case config::PipelineSchedule::ZbV:
      return pipeline::ScheduleKind::ZeroBubbleV;
    case config::PipelineSchedule::DualPipeV:
      return pipeline::ScheduleKind::DualPipeV;
    case config::PipelineSchedule::OneFOneB:
      break;
  }
  return pipeline::ScheduleKind::OneFOneB;
}

}  // namespace

Trainer::Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
                 std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
                 TrainerGroups groups, std::ostream& log)
    : recipe_(recipe), train_(std::move(train)), valid_(std::move(valid)) {
  refuse_cpu_only_features(recipe_);
  recipe_.resolve_for_world(groups.world->size());
  check_groups(groups);
  build_model(tokenizer_vocab);
  feeder_ = std::make_unique<BatchFeeder>(recipe_, model_.vocab_size, *groups_.dp, *replicas_.dp,
                                          *groups_.cp, device_);
  build_schedule();
  build_optimizer();
  checkpointer_ = std::make_unique<Checkpointer>(
      recipe_, replicas_,
      TrainingState{&store_, optimizer_.get(), grad_sync_.get(), scaler_.get(), &schedule_,
                    model_.moe.get()},
      model_.vocab_size, model_.padded_vocab, groups_.world->rank() == 0 ? &log : nullptr);
  if (recipe_.checkpoint.local_interval)
    local_ = std::make_unique<LocalCheckpoints>(
        recipe_, *groups_.world,
        TrainingState{&store_, optimizer_.get(), grad_sync_.get(), scaler_.get(), &schedule_,
                      model_.moe.get()},
        groups_.world->rank() == 0 ? &log : nullptr);
  if (valid_)
    evaluator_ = std::make_unique<Evaluator>(recipe_, *valid_, *feeder_, *pipeline_, *groups_.pp,
                                             *replicas_.dp, device_);
  build_logging(log);
}

Trainer::~Trainer() = default;

// The process groups (groups of one where none are given) must match the recipe's layout;
// the recipe must ask only for what exists.
void Trainer::check_groups(TrainerGroups g) {
  single_ = parallel::make_single_process_communicator();
  // Every group behind a timer (the step split's exposed communication, step_split.h).
  timed_ = std::make_unique<TimedGroups>(complete_groups(recipe_, g, single_.get()));
  groups_ = timed_->groups();
  replicas_ = groups_.weight_replicas();
  rerun_ = std::make_unique<StepRerun>(recipe_, *groups_.world);
  const auto& tr = recipe_.training;
  device_ = tr.device == config::TrainingDevice::CUDA ? Device::CUDA : Device::CPU;
  // The caller selects the GPU (cuda::select_device_for_local_rank) and gives NCCL groups
  // (tools/pretrain.cpp); here only whether one is usable at all.
  MT_INPUT_CHECK(device_ == Device::CPU || device_available(Device::CUDA), recipe_.source_path,
                 ": training.device: cuda but no CUDA device is visible (or this build has no CUDA "
                 "backend: configure with -DMEGATRON_CUDA=ON)");
  MT_INPUT_CHECK(train_->seq_length() == recipe_.model.seq_length, recipe_.source_path,
                 ": data samples have seq_length ", train_->seq_length(),
                 " but model.seq_length is ", recipe_.model.seq_length);
  if (tr.threads > 0) omp_set_num_threads(static_cast<int>(tr.threads));
  num_micro_ = recipe_.num_microbatches(groups_.world->size());
}

// This rank's chunks on a parameter store on the training device (its activations follow),
// finalized in the model dtype and initialized from the seed.
void Trainer::build_model(int64_t tokenizer_vocab) {
  check_host_memory_fits(recipe_, tokenizer_vocab, device_);
  store_ = ParamStore(device_);
  model_ = models::build_model_chunks(
      recipe_, tokenizer_vocab, store_, *groups_.tp, groups_.pp->rank(), groups_.pp->size(),
      {groups_.ep, groups_.expert_tp, groups_.dp, groups_.cp}, groups_.cp);
  // Mixed precision: weights and activations in bf16/fp16 (the layers compute with them; the
  // CPU kernels widen to fp32 internally), fp32 master weights and main gradients. The dense
  // region is sharded over the dp shard group, the experts' over expert dp (ZeRO stages).
  store_.finalize(models::model_dtype_of(recipe_.training), sharding_for(recipe_, replicas_));
  store_.initialize(recipe_.training.seed);
}

// The step's schedule: the zero-bubble greedy plans on parallel.zero_bubble_pass_times when set.
pipeline::Schedule Trainer::schedule_for(pipeline::ScheduleKind kind, int pp, int vpp) const {
  const std::vector<double>& t = recipe_.parallel.zero_bubble_pass_times;
  pipeline::PassCosts costs;  // equal passes unless measured ones are given
  if (t.size() == 3) costs = {t[0], t[1], t[2]};
  return pipeline::make_schedule(kind, pp, static_cast<int>(num_micro_), vpp, 0, costs);
}

// The pipeline runtime over this rank's chunks and its actions of the step's schedule
// (parallel.pipeline_schedule): 1F1B (one stage without pipelining), interleaved over virtual
// stages, the zero-bubble ZB-H1 and ZB-V, or DualPipeV.
void Trainer::build_schedule() {
  const TransformerSpec& t = model_.transformer;
  const int64_t pp = groups_.pp->size(), vpp = recipe_.parallel.virtual_stages();
  // A stage's activations: this cp rank's rows, split over tp with sequence parallelism.
  const int64_t cp_rows = t.seq_length / groups_.cp->size();
  const int64_t rows = t.sequence_parallel ? cp_rows / groups_.tp->size() : cp_rows;
  std::vector<const models::Model*> chunks;
  for (const auto& c : model_.chunks) chunks.push_back(c.get());
  pipeline_ = std::make_unique<PipelineRuntime>(chunks, *groups_.pp, rows, t.hidden);
  pipeline::Schedule schedule =
      schedule_for(schedule_kind(recipe_.parallel.pipeline_schedule_kind()), static_cast<int>(pp),
                   static_cast<int>(vpp));
  pipeline_->set_buffered_sends(schedule.buffered_sends);
  pipeline_->set_placement(schedule.placement);
  schedule_actions_ = std::move(schedule.ranks[static_cast<size_t>(groups_.pp->rank())]);
  // The last stage's tied LM-head copy is not counted again in the gradient norm (with the V
  // placement the last virtual stage shares stage 0's table: no copy).
  if (pp > 1 && !v_placement())
    for (const auto& c : model_.chunks)
      if (Parameter* w = c->word_embeddings();
          w && !c->stage().pre_process && model_.tied_embeddings)
        w->shared_copy = true;
  if (!recipe_.logging.timeline.empty()) {
    groups_.world->barrier();  // the ranks' clocks start together (one step spans all ranks)
    timeline_ = std::make_unique<pipeline::TimelineRecorder>(groups_.world->rank());
  }
  if (recipe_.logging.profile) profile_ = std::make_unique<StepProfile>(recipe_.logging, device_);
}

// Loss scaling (dynamic for fp16), data-parallel gradient buckets, AdamW (sharded with the
// distributed optimizer) and the LR schedule.
void Trainer::build_optimizer() {
  const auto& tr = recipe_.training;
  const auto& o = recipe_.optimizer;
  optim::LossScalerConfig scaling;
  scaling.initial_scale = tr.initial_loss_scale;
  scaling.min_scale = tr.min_loss_scale;
  scaling.growth_interval = tr.loss_scale_window;
  scaling.hysteresis = tr.hysteresis;
  scaling.clipping = o.clip_grad > 0.0;
  scaler_ = std::make_unique<optim::LossScaler>(store_.model_dtype() == DType::F16, scaling);
  grad_sync_ = std::make_unique<GradientSync>(store_, replicas_);
  if (recipe_.parallel.grad_compression == config::GradCompression::Topk)
    grad_sync_->compress_topk(recipe_.parallel.topk_ratio);
  grad_sync_->quantize_sharded(recipe_.parallel.zero_quantized_weights,
                               recipe_.parallel.zero_quantized_gradients);
  for (const auto& c : model_.chunks) c->set_unit_hooks(grad_sync_->unit_hooks());
  // A schedule with W passes adds weight gradients after their backward.
  grad_sync_->defer_weight_grads(std::any_of(
      schedule_actions_.begin(), schedule_actions_.end(),
      [](const pipeline::Action& a) { return a.kind == pipeline::ActionKind::WeightGrad; }));
  optimizer_ = std::make_unique<optim::Optimizer>(
      store_,
      optim::OptimizerSettings{o.type, o.beta1, o.beta2, o.eps, o.weight_decay, o.freeze_step});
  if (o.type == config::OptimizerType::OnebitAdam)
    optimizer_->set_momentum_exchange(grad_sync_->use_onebit_adam());
  schedule_.max_lr = o.lr;
  schedule_.min_lr = o.min_lr;
  schedule_.warmup_iters = o.schedule.warmup_iters;
  schedule_.decay_iters = o.schedule.decay_iters.value_or(tr.train_iters);
  schedule_.decay = o.schedule.decay;
}

// FLOPs per step, the peak MFU divides by (training.peak_tflops; on a GPU the cluster
// section's gpu_tflops; on the CPU the hardware peak measured for the compute dtype), and the
// metrics sink with the run's opening lines.
void Trainer::build_logging(std::ostream& log) {
  const auto& tr = recipe_.training;
  flops_per_step_ = planning::megatron_flops_per_step(
      planning::with_moe(planning::flops_model_from_spec(model_.transformer, model_.padded_vocab),
                         recipe_.model.moe),
      tr.global_batch_size);
  peak_ = ComputePeak::decide(device_, store_.model_dtype(), tr.peak_tflops,
                              recipe_.cluster.gpu_tflops);
  metrics_ = std::make_unique<MetricsSink>(recipe_, groups_.world->rank() == 0, log, peak_, device_,
                                           groups_.world->size());
  if (std::ostream* out = metrics_->console()) {
    const StreamFormatGuard format(*out);
    const auto& m = recipe_.model;
    *out << "model: " << config::option_name(m.arch) << ", " << store_.numel() << " parameters ("
         << m.num_layers << " layers, hidden " << m.hidden_size << ", vocab padded to "
         << model_.padded_vocab << "); dp " << groups_.dp->size()
         << (groups_.cp->size() > 1
                 ? concat(", cp ", groups_.cp->size(), " (",
                          config::option_name(recipe_.parallel.cp_comm_type), ")")
                 : std::string())
         << ", " << num_micro_ << " micro-batches of " << tr.micro_batch_size
         << " per step per rank; "
         << "optimizer state " << optimizer_->state_bytes() / 1048576.0 << " MiB per rank"
         << (grad_sync_->dense_sharded()
                 ? concat(" (", config::option_name(recipe_.sharding_strategy()), ")")
                 : "")
         << "; " << std::setprecision(4) << flops_per_step_ / 1e12 << " TFLOP per step; "
         << device_name(device_) << "\n"
         << peak_.describe(omp_get_max_threads()) << std::flush;
    const auto& o = recipe_.optimizer;
    if (o.type == config::OptimizerType::OnebitAdam)
      *out << "optimizer: onebit_adam, AdamW for " << o.freeze_step
           << " steps, then the variance frozen and the momenta exchanged as signs"
           << (o.clip_grad > 0.0 ? concat("; clip_grad ", o.clip_grad,
                                          " clips those steps only (after them no rank holds "
                                          "the whole gradient)")
                                 : std::string())
           << "\n";
  }
}

void Trainer::save_checkpoint(int64_t iteration) { checkpointer_->save(iteration, sample_offset_); }

int64_t Trainer::load_checkpoint() {
  const Checkpointer::Resume resume = checkpointer_->load();
  sample_offset_ = resume.sample_offset;
  if (local_)
    if (const auto local = local_->restore(resume.iteration)) {
      sample_offset_ = local->sample_offset;
      return local->iteration;
    }
  return resume.iteration;
}

EvalMetrics Trainer::evaluate(int64_t iteration) {
  MT_CHECK(evaluator_ != nullptr, "evaluate() without validation data");
  return evaluator_->evaluate(iteration);
}

// This step's micro-batches on the device and the weights of their losses: normalised by the
// predicted tokens (and sentence pairs) of the whole global batch, so any micro-batching and
// data-parallel (or context-parallel) split gives the same mean and the same gradients.
Trainer::StepBatch Trainer::prepare_batch(int64_t iteration) {
  const int64_t G = recipe_.training.global_batch_size;
  feeder_->fill(*train_, sample_offset_ + (iteration - 1) * G, num_micro_, iteration, true,
                batches_);
  StepBatch b;
  std::tie(b.lm_targets, b.aux_targets) = feeder_->global_target_counts(batches_);
  device_batches_.resize(batches_.size());
  for (size_t m = 0; m < batches_.size(); ++m) device_batches_[m] = feeder_->on_device(batches_[m]);
  // A global batch with no predicted token (every label masked) takes a zero-gradient step, as
  // Megatron's clamped token count does, and the step line says so.
  b.lm_divisor = std::max(b.lm_targets, 1.0);
  b.scale = scaler_->scale();
  b.weights =
      models::LossWeights{static_cast<float>(b.scale / b.lm_divisor),
                          b.aux_targets > 0 ? static_cast<float>(b.scale / b.aux_targets) : 0.0f};
  return b;
}

// Forward and backward of every micro-batch through the pipeline, then the gradient reductions.
models::LossSums Trainer::run_micro_batches(const StepBatch& b) {
  store_.zero_grads();
  grad_sync_->begin_step();
  // The router losses of every micro-batch of the global batch, averaged (each rank's gradients
  // are summed over dp, like the LM loss's).
  if (model_.moe) {
    model_.moe->set_loss_weight(static_cast<float>(b.scale / (num_micro_ * groups_.dp->size())));
    (void)model_.moe->take_times();  // evaluation's forwards are not this step's
  }
  const PipelineRuntime::FillMicroBatch fill_mb = [&](int m, models::MicroBatch& mb) {
    mb = device_batches_[static_cast<size_t>(m)];
    mb.info.timeline = timeline_.get();  // context parallelism records its exchanges there
    mb.info.microbatch = m;
  };
  // One stage: the data-parallel reduction overlaps the last micro-batch's backward.
  PipelineRuntime::LastBackwardHooks overlap{
      [this] { grad_sync_->begin_last_backward(); },
      [this](int64_t w) { grad_sync_->grads_ready_below(w); }};
  const bool one_stage = groups_.pp->size() == 1;
  const models::LossSums sums = pipeline_->run(schedule_actions_, fill_mb, b.weights,
                                               timeline_.get(), one_stage ? &overlap : nullptr);
  for (const bool after_dp : {false, true}) {
    if (after_dp) grad_sync_->finish();
    reduce_tied_embedding_grads(model_.chunks, store_, *groups_.pp, *groups_.embedding,
                                model_.tied_embeddings && !v_placement(), after_dp);
  }
  reduce_sequence_parallel_grads(store_, optimizer_->segments(), *groups_.tp, sp_grad_scratch_);
  return sums;
}

// The losses of the whole global batch (and the MoE statistics).
StepMetrics Trainer::step_losses(int64_t iteration, const models::LossSums& sums,
                                 const StepBatch& b) {
  StepMetrics metrics;
  metrics.iteration = iteration;
  // Each cp rank holds part of every sequence's tokens: the sums run over dp x cp.
  const models::LossSums total = reduce_losses(sums, *groups_.pp, *replicas_.dp, device_);
  metrics.lm_loss = total.lm / b.lm_divisor;
  metrics.no_targets = b.lm_targets == 0;
  metrics.has_aux = b.aux_targets > 0;
  metrics.aux_loss = metrics.has_aux ? total.aux / b.aux_targets : 0.0;
  metrics.loss = metrics.lm_loss + metrics.aux_loss;
  metrics.loss_scale = b.scale;
  if (model_.moe)
    finish_moe_step(*model_.moe,
                    {groups_.tp, groups_.dp, groups_.pp, groups_.cp,
                     model_.transformer.sequence_parallel, model_.transformer.num_layers, device_},
                    num_micro_ * groups_.dp->size(), metrics);
  return metrics;
}

models::LossSums Trainer::compute_step(const StepBatch& batch, int64_t iteration, bool rerun) {
  const auto& par = recipe_.parallel;
  if (par.grad_compression == config::GradCompression::Topk && par.topk_warmup_iters > 0) {
    // Geometric from every entry (iteration 1) down to topk_ratio (after the warm-up).
    const double t = std::min(
        1.0, static_cast<double>(iteration - 1) / static_cast<double>(par.topk_warmup_iters));
    grad_sync_->set_topk_density(std::pow(par.topk_ratio, t));
  }
  grad_sync_->set_local_grads(optimizer_->compressing());  // 1-bit Adam after its freeze
  models::LossSums sums = run_micro_batches(batch);
  if (rerun_->inject(iteration, rerun)) {  // training.error_injection_*: NaN loss and gradients
    sums.lm = std::numeric_limits<double>::quiet_NaN();
    ops::fill(store_.grads(), std::numeric_limits<float>::quiet_NaN());
  }
  return sums;
}

void Trainer::measure_grad_norm(StepMetrics& metrics) {
  // Norm of the scaled gradients; every rank gets the same value, so all agree on overflow.
  scaled_grad_norm_ =
      optim::global_grad_norm(optimizer_->segments(), groups_.tp->rank(), *groups_.model,
                              grad_sync_->dense_sharded_over(), grad_sync_->expert_norm_groups());
  metrics.grad_norm = scaled_grad_norm_ / metrics.loss_scale;
}

void Trainer::validate_step(int64_t iteration, const StepBatch& batch, const models::LossSums& sums,
                            StepMetrics& metrics) {
  // fp16's dynamic scaling expects overflowing gradients now and then: only its loss counts.
  const std::string why =
      rerun_->suspicious(metrics.loss, scaler_->dynamic() ? 0.0 : metrics.grad_norm);
  if (why.empty()) {
    rerun_->accept(metrics.loss);
    return;
  }
  const RankResult first{sums.lm + sums.aux, ops::sum_squares(store_.grads())};
  const models::LossSums again = compute_step(batch, iteration, true);
  StepMetrics second = step_losses(iteration, again, batch);
  measure_grad_norm(second);
  const RankResult second_rank{again.lm + again.aux, ops::sum_squares(store_.grads())};
  const int64_t G = recipe_.training.global_batch_size;
  const StepRerun::Verdict v = rerun_->judge(
      iteration, why, first, second_rank, metrics.loss, second.loss, metrics.grad_norm,
      second.grad_norm, describe_samples(recipe_, sample_offset_ + (iteration - 1) * G, G));
  if (std::ostream* out = metrics_->console()) *out << v.message << "\n" << std::flush;
  rerun_reports_.push_back(v.message);
  if (v.stop) throw Error(v.message);
  if (!v.repeated) {
    metrics = second;  // the gradients are the re-run's too
    if (rerun_->suspicious(metrics.loss, 0.0).empty()) rerun_->accept(metrics.loss);
  }
  metrics.rerun_skipped = v.skip_batch;
}

// Clipping and the optimizer step (skipped on an fp16 overflow or a skipped batch).
void Trainer::apply_update(StepMetrics& metrics) {
  const double scale = metrics.loss_scale;
  const double scaled_norm = scaled_grad_norm_;
  parallel::Communicator* dp_shards = grad_sync_->dense_sharded_over();
  const optim::ExpertNormGroups experts = grad_sync_->expert_norm_groups();
  const double clip = recipe_.optimizer.clip_grad;
  if (metrics.rerun_skipped) {  // no update, no schedule step (as an fp16 overflow)
    metrics.lr = schedule_.lr(optimizer_->steps_taken() + 1);
    metrics.skipped = true;
    metrics.dp_comm_bytes = grad_sync_->take_bytes();
    return;
  }
  if (!std::isfinite(metrics.loss))
    throw Error(concat("iteration ", metrics.iteration, ": non-finite loss ", metrics.loss,
                       " (lower optimizer.lr)"));
  // The schedule counts optimizer steps, not iterations: a step skipped on fp16 overflow does
  // not advance it (Megatron's scheduler steps only after a successful update).
  metrics.lr = schedule_.lr(optimizer_->steps_taken() + 1);
  if (!std::isfinite(scaled_norm) ||
      fp16_gradient_overflow(store_, optimizer_->segments(), *groups_.model, dp_shards, device_,
                             experts.parallel)) {
    if (!scaler_->dynamic())
      throw Error(concat("iteration ", metrics.iteration, ": non-finite gradient norm ",
                         scaled_norm, " (lower optimizer.lr",
                         clip > 0.0 ? ")" : ", or set optimizer.clip_grad)"));
    metrics.skipped = true;  // fp16 overflow: skip the update, back off the scale
    scaler_->update(true);
  } else {
    // Unscale and clip in one pass over the gradients.
    double factor = 1.0 / scale;
    if (clip > 0.0 && metrics.grad_norm > clip && !optimizer_->compressing())
      factor *= clip / (metrics.grad_norm + 1e-6);
    if (factor != 1.0) optim::scale_grads(optimizer_->segments(), factor);
    optimizer_->step(metrics.lr);
    grad_sync_->gather_params();
    scaler_->update(false);
  }
  metrics.dp_comm_bytes = grad_sync_->take_bytes();
}

// Step time, tokens/s, TFLOP/s and MFU (the peaks measured again if a step outran them).
void Trainer::time_step(StepMetrics& metrics, std::chrono::steady_clock::time_point t0) {
  const auto& tr = recipe_.training;
  // On a device the step's last kernels (AdamW, casts) may still be queued: wait for them, so
  // the step time covers the whole step. (A one-element copy of the masters did, until an
  // H200 run with every master offloaded to the host left none on the device.)
  synchronize(device_);
  metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics.tokens_per_s =
      static_cast<double>(tr.global_batch_size * recipe_.model.seq_length) / metrics.seconds;
  if (model_.moe) {
    const moe::MoeTimes mt = model_.moe->take_times();
    metrics.moe_dispatch_share = (mt.dispatch + mt.combine) / metrics.seconds;
  }
  metrics.tflops = flops_per_step_ / metrics.seconds / 1e12 / groups_.world->size();
  if (peak_.remeasure_if_exceeded(metrics.tflops * 1e12))
    if (std::ostream* out = metrics_->console())
      *out << "peak: measured again, " << peak_.peak_flops / 1e12
           << " TFLOP/s per rank (a step outran the start's measurement: something competing "
              "for the cores had lowered it)\n";
  if (peak_.remeasure_gemm_if_exceeded(metrics.tflops * 1e12))
    if (std::ostream* out = metrics_->console())
      *out << "gemm: measured again, " << peak_.gemm_flops / 1e12
           << " TFLOP/s per rank (a step outran the start-up GEMM probe)\n";
  metrics.mfu = peak_.peak_flops > 0 ? metrics.tflops * 1e12 / peak_.peak_flops : 0.0;
  metrics.of_gemm = peak_.gemm_flops > 0 ? metrics.tflops * 1e12 / peak_.gemm_flops : 0.0;
}

StepMetrics Trainer::train_step(int64_t iteration) {
  StepTimer timer(*timed_);
  const StepBatch batch = prepare_batch(iteration);
  timer.mark(StepTimer::Phase::Data);
  const models::LossSums sums = compute_step(batch, iteration, false);
  timer.mark(StepTimer::Phase::Compute);
  StepMetrics metrics = step_losses(iteration, sums, batch);
  measure_grad_norm(metrics);
  if (rerun_->enabled()) validate_step(iteration, batch, sums, metrics);
  apply_update(metrics);
  time_step(metrics, timer.start());
  timer.mark(StepTimer::Phase::Optimizer);
  metrics.split = timer.split();
  return metrics;
}

void Trainer::track_stragglers(const StepMetrics& m, TrainSummary& summary) {
  const int64_t interval = recipe_.logging.straggler_interval;
  if (interval <= 0) return;
  straggler_sum_ += m.split;
  ++straggler_steps_;
  if (m.iteration % interval != 0) return;
  const auto report = gather_stragglers(*groups_.world, straggler_sum_, straggler_steps_,
                                        m.iteration - straggler_steps_ + 1, m.iteration);
  straggler_sum_ = StepSplit{};
  straggler_steps_ = 0;
  if (!report) return;
  metrics_->stragglers(*report);
  summary.stragglers.push_back(*report);
}

std::string Trainer::should_stop(double elapsed_minutes) {
  const auto& limit = recipe_.training.exit_duration_minutes;
  return agreed_stop_reason(*groups_.world, limit && elapsed_minutes >= *limit);
}

TrainSummary Trainer::run() {
  const auto& tr = recipe_.training;
  const auto& ck = recipe_.checkpoint;
  const auto start_time = std::chrono::steady_clock::now();
  install_exit_signal_handlers();
  const int64_t interval = std::max<int64_t>(recipe_.logging.interval, 1);
  const bool eval_enabled = tr.eval_iters > 0 && evaluator_ != nullptr;
  TrainSummary summary;
  summary.start_iteration = load_checkpoint();
  summary.last_iteration = summary.start_iteration;
  if (checkpointer_) checkpointer_->prepare_saves();

  if (eval_enabled && summary.start_iteration == 0)
    metrics_->eval(summary.evals.emplace_back(evaluate(0)));
  int64_t last_saved = summary.start_iteration;
  for (int64_t it = summary.start_iteration + 1; it <= tr.train_iters; ++it) {
    if (profile_) profile_->before_step(it);
    const StepMetrics m = train_step(it);
    if (profile_) {
      const std::string report = profile_->after_step(it, m.seconds);
      if (std::ostream* out = metrics_->console(); out && !report.empty()) *out << report;
    }
    summary.steps.push_back(m);
    summary.last_iteration = it;
    metrics_->step(m, it % interval == 0 || it == 1 || it == tr.train_iters);
    track_stragglers(m, summary);
    const bool periodic = tr.eval_interval > 0 && it % tr.eval_interval == 0;
    if (eval_enabled && (periodic || it == tr.train_iters))
      metrics_->eval(summary.evals.emplace_back(evaluate(it)));
    if (!ck.save.empty() && ck.save_interval && it % *ck.save_interval == 0) {
      save_checkpoint(it);
      last_saved = it;
    } else if (checkpointer_) {
      checkpointer_->poll();  // commits an asynchronous save once every rank has written it
    }
    if (local_ && it % *ck.local_interval == 0) local_->save(it, sample_offset_);
    const double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count() / 60.0;
    const std::string stop = it < tr.train_iters ? should_stop(minutes) : std::string();
    if (!stop.empty()) {
      summary.stopped_early = true;
      // Rank 0 on the console, every other rank on stderr, all with the same reason.
      if (std::ostream* out = metrics_->console())
        *out << "stopping at iteration " << it << " (" << stop << ")\n" << std::flush;
      else
        std::cerr << "rank " << groups_.world->rank() << ": stopping at iteration " << it << " ("
                  << stop << ")\n"
                  << std::flush;
      break;
    }
  }
  if (!ck.save.empty() && summary.last_iteration > last_saved)
    save_checkpoint(summary.last_iteration);
  if (checkpointer_) checkpointer_->finish_saves();  // nothing in flight when the run ends
  summary.reruns = rerun_reports_;
  if (timeline_) {
    const std::string path = config::resolve_output_path(recipe_.logging.timeline) + ".rank" +
                             std::to_string(groups_.world->rank()) + ".jsonl";
    pipeline::write_timeline_jsonl(path, timeline_->events());
    if (std::ostream* out = metrics_->console())
      *out << "timeline written to " << path << " (and the other ranks')\n";
  }
  return summary;
}

}  // namespace megatron::training
