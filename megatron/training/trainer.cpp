#include "megatron/training/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "megatron/backend/ops.h"
#include "megatron/training/sampler.h"
#include "megatron/training/signals.h"
#include "models/bert/bert_model.h"

namespace megatron::training {

namespace {
// "a, b" from a data section's dataset paths (for messages).
std::string data_paths(const std::vector<config::DatasetEntry>& sources) {
  std::string s;
  for (const auto& d : sources) s += (s.empty() ? "" : ", ") + d.path;
  return s.empty() ? std::string("none") : s;
}

// " (92% of gemm)" beside MFU when a GEMM rate was measured.
std::string of_gemm_text(double of_gemm) {
  if (of_gemm <= 0) return "";
  std::ostringstream s;
  s << std::fixed << std::setprecision(0) << " (" << of_gemm * 100 << "% of gemm)";
  return s.str();
}
}  // namespace

DType model_dtype_of(const config::TrainingConfig& training) {
  if (training.precision == "bf16") return DType::BF16;
  if (training.precision == "fp16") return DType::F16;
  return DType::F32;
}

TransformerSpec transformer_spec_from_recipe(const config::Recipe& r, int64_t tp_size) {
  const auto& m = r.model;
  TransformerSpec t;
  t.num_layers = m.num_layers;
  t.hidden = m.hidden_size;
  t.heads = m.num_attention_heads;
  t.query_groups = m.query_groups();
  t.ffn = m.ffn();
  t.seq_length = m.seq_length;
  t.norm = m.normalization == "rmsnorm" ? Norm::Kind::RMSNorm : Norm::Kind::LayerNorm;
  t.swiglu = m.activation == "swiglu";
  t.rope = m.position_embedding == "rope";
  t.rope_theta = static_cast<float>(m.rope_theta);
  t.bias = m.add_bias;
  // BERT: bidirectional attention over the padding mask, post-LN blocks (the original).
  t.causal = m.arch != "bert";
  t.post_norm = m.arch == "bert";
  t.hidden_dropout = static_cast<float>(m.hidden_dropout);
  t.attention_dropout = static_cast<float>(m.attention_dropout);
  t.norm_eps = static_cast<float>(m.layernorm_epsilon);
  t.init_std = static_cast<float>(m.init_method_std);
  t.seed = r.training.seed;
  t.sequence_parallel = r.parallel.sequence_parallel && tp_size > 1;
  t.recompute = parse_recompute(r.training.recompute);
  t.flash_attention = m.flash_attention(r.training.device);
  t.activation_dtype = model_dtype_of(r.training);
  return t;
}

namespace {

int64_t model_vocab(const config::Recipe& r, int64_t tokenizer_vocab) {
  const int64_t v = r.model.vocab_size > 0 ? r.model.vocab_size : tokenizer_vocab;
  MT_INPUT_CHECK(v >= tokenizer_vocab, r.source_path, ": model.vocab_size ", r.model.vocab_size,
                 " is smaller than the tokenizer's vocabulary ", tokenizer_vocab);
  return v;
}

models::BertSpec bert_spec_from_recipe(const config::Recipe& r, int64_t tokenizer_vocab,
                                       int64_t tp_size) {
  const auto& m = r.model;
  models::BertSpec s;
  s.transformer = transformer_spec_from_recipe(r, tp_size);
  MT_INPUT_CHECK(!s.transformer.rope, r.source_path,
                 ": model.position_embedding: BERT uses learned positions, not rope");
  MT_INPUT_CHECK(m.tie_embeddings, r.source_path,
                 ": model.tie_embeddings: BERT's masked-LM decoder is tied to the embeddings");
  s.vocab_size = model_vocab(r, tokenizer_vocab);
  s.padded_vocab_size = m.padded_vocab_size(tokenizer_vocab, tp_size);
  s.max_positions = m.max_positions();
  s.binary_head = r.data.bert_binary_head;
  s.embedding_dropout = static_cast<float>(m.hidden_dropout);
  return s;
}

}  // namespace

models::GPTSpec gpt_spec_from_recipe(const config::Recipe& r, int64_t tokenizer_vocab,
                                     int64_t tp_size) {
  const auto& m = r.model;
  MT_INPUT_CHECK(m.arch == "gpt" || m.arch == "llama", r.source_path, ": model.arch: '", m.arch,
                 "' is not a decoder (gpt or llama)");
  models::GPTSpec s;
  s.transformer = transformer_spec_from_recipe(r, tp_size);
  s.vocab_size = model_vocab(r, tokenizer_vocab);
  s.padded_vocab_size = m.padded_vocab_size(tokenizer_vocab, tp_size);
  s.max_positions = s.transformer.rope ? 0 : m.max_positions();
  s.tie_embeddings = m.tie_embeddings;
  s.embedding_dropout = static_cast<float>(m.hidden_dropout);
  return s;
}

planning::FlopsModel flops_model_from_spec(const TransformerSpec& t, int64_t padded_vocab) {
  return planning::FlopsModel{t.num_layers, t.hidden, t.heads,      t.query_groups,
                              t.head_dim(), t.ffn,    t.seq_length, padded_vocab,
                              t.swiglu,     1};
}

planning::FlopsModel flops_model_from_spec(const models::GPTSpec& s) {
  return flops_model_from_spec(s.transformer, s.padded_vocab_size);
}

Trainer::Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
                 std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
                 parallel::Communicator& world, std::ostream& log)
    : Trainer(recipe, tokenizer_vocab, std::move(train), std::move(valid),
              TrainerGroups{&world, nullptr, nullptr}, log) {}

Trainer::Trainer(const config::Recipe& recipe, int64_t tokenizer_vocab,
                 std::shared_ptr<const BatchSource> train, std::shared_ptr<const BatchSource> valid,
                 TrainerGroups groups, std::ostream& log)
    : recipe_(recipe),
      train_(std::move(train)),
      valid_(std::move(valid)),
      single_(parallel::make_single_process_communicator()),
      world_(groups.world),
      tp_(groups.tp ? groups.tp : single_.get()),
      dp_(groups.dp ? groups.dp : single_.get()),
      pp_(groups.pp ? groups.pp : single_.get()),
      embedding_(groups.embedding ? groups.embedding : single_.get()),
      model_group_(groups.model ? groups.model : tp_),
      log_(&log),
      is_logger_(groups.world->rank() == 0) {
  recipe_.resolve_for_world(world_->size());
  const auto& tr = recipe_.training;
  MT_INPUT_CHECK(recipe_.parallel.tensor == tp_->size() && recipe_.parallel.data == dp_->size() &&
                     recipe_.parallel.pipeline == pp_->size(),
                 recipe_.source_path, ": parallel.tensor=", recipe_.parallel.tensor,
                 " pipeline=", recipe_.parallel.pipeline, " data=", recipe_.parallel.data,
                 " do not match the process groups (tp ", tp_->size(), ", pp ", pp_->size(),
                 ", dp ", dp_->size(), ")");
  MT_INPUT_CHECK(recipe_.parallel.expert == 1 && recipe_.parallel.context == 1, recipe_.source_path,
                 ": parallel.expert/context > 1 are not available yet");
  // Training a dense model in place of the requested MoE one would be silently wrong.
  MT_INPUT_CHECK(recipe_.model.num_experts == 0, recipe_.source_path,
                 ": model.num_experts: ", recipe_.model.num_experts,
                 " asks for mixture-of-experts layers, which are not implemented yet (use 0)");
  MT_INPUT_CHECK(tr.device == "cpu" || tr.device == "cuda", recipe_.source_path,
                 ": training.device: unknown device '", tr.device, "' (expected cpu or cuda)");
  device_ = tr.device == "cuda" ? Device::CUDA : Device::CPU;
  // The caller selects the GPU (cuda::select_device_for_local_rank) and gives NCCL groups
  // (tools/pretrain.cpp); here only whether one is usable at all.
  MT_INPUT_CHECK(device_ == Device::CPU || device_available(Device::CUDA), recipe_.source_path,
                 ": training.device: cuda but no CUDA device is visible (or this build has no CUDA "
                 "backend: configure with -DMEGATRON_CUDA=ON)");
  // The parameters live on the training device, and so do the activations and per-step
  // buffers of every layer built on them.
  store_ = ParamStore(device_);
  MT_INPUT_CHECK(train_->seq_length() == recipe_.model.seq_length, recipe_.source_path,
                 ": data samples have seq_length ", train_->seq_length(),
                 " but model.seq_length is ", recipe_.model.seq_length);
  if (tr.threads > 0) omp_set_num_threads(static_cast<int>(tr.threads));

  dp_size_ = dp_->size();
  dp_rank_ = dp_->rank();
  num_micro_ = recipe_.num_microbatches(world_->size());

  const planning::FlopsModel flops_model = build_model(tokenizer_vocab);
  vocab_size_ = model_vocab(recipe_, tokenizer_vocab);
  padded_vocab_ = flops_model.padded_vocab;
  const bool distributed = recipe_.optimizer.distributed && dp_size_ > 1;
  // Mixed precision: weights and activations in bf16/fp16 (the layers compute with them; the
  // CPU kernels widen to fp32 internally), fp32 master weights and main gradients, dynamic
  // loss scaling for fp16.
  const DType model_dtype = model_dtype_of(tr);
  store_.finalize(distributed ? dp_size_ : 1, model_dtype);
  optim::LossScalerConfig scaling;
  scaling.initial_scale = tr.initial_loss_scale;
  scaling.min_scale = tr.min_loss_scale;
  scaling.growth_interval = tr.loss_scale_window;
  scaling.hysteresis = tr.hysteresis;
  scaler_ = std::make_unique<optim::LossScaler>(model_dtype == DType::F16, scaling);
  store_.initialize(tr.seed);

  // Buckets of ~16 MiB of fp32 gradients: large enough for bandwidth, small enough to overlap.
  constexpr int64_t kBucketElements = int64_t{4} << 20;
  grad_sync_ =
      std::make_unique<optim::DataParallelGrads>(store_, *dp_, kBucketElements, distributed);
  const auto& o = recipe_.optimizer;
  optimizer_ = std::make_unique<optim::Optimizer>(
      store_, optim::OptimizerSettings{o.type, o.beta1, o.beta2, o.eps, o.weight_decay},
      grad_sync_->owned());
  schedule_.max_lr = o.lr;
  schedule_.min_lr = o.min_lr;
  schedule_.warmup_iters = o.schedule.warmup_iters;
  schedule_.decay_iters = o.schedule.decay_iters.value_or(tr.train_iters);
  schedule_.decay = optim::parse_decay(o.schedule.decay);

  flops_per_step_ = planning::megatron_flops_per_step(flops_model, tr.global_batch_size);
  // The peak for MFU: the recipe's training.peak_tflops, on a GPU the cluster section's
  // gpu_tflops, on the CPU the hardware peak measured for the compute dtype.
  peak_ = ComputePeak::decide(device_, model_dtype, tr.peak_tflops, recipe_.cluster.gpu_tflops);

  if (is_logger_ && !recipe_.logging.jsonl.empty()) {
    const std::string path = config::resolve_path(recipe_, recipe_.logging.jsonl);
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    jsonl_.open(path, std::ios::app);
    MT_INPUT_CHECK(jsonl_.good(), "logging.jsonl: cannot open '", path, "' for writing");
    nlohmann::json start = peak_.to_json();
    start["event"] = "start";
    start["device"] = device_name(device_);
    start["threads_per_rank"] = omp_get_max_threads();
    start["ranks"] = world_->size();
    jsonl_ << start.dump() << "\n" << std::flush;
  }
  if (is_logger_ && !recipe_.logging.tensorboard_dir.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(
        config::resolve_path(recipe_, recipe_.logging.tensorboard_dir));
  if (is_logger_) {
    const auto& m = recipe_.model;
    *log_ << "model: " << m.arch << ", " << store_.numel() << " parameters (" << m.num_layers
          << " layers, hidden " << m.hidden_size << ", vocab padded to " << flops_model.padded_vocab
          << "); dp " << dp_size_ << ", " << num_micro_ << " micro-batches of "
          << tr.micro_batch_size << " per step per rank; "
          << "optimizer state " << optimizer_->state_bytes() / 1048576.0 << " MiB per rank"
          << (distributed ? " (distributed)" : "") << "; " << std::setprecision(4)
          << flops_per_step_ / 1e12 << " TFLOP per step; " << device_name(device_) << "\n"
          << peak_.describe(omp_get_max_threads()) << std::flush;
  }
}

Trainer::~Trainer() = default;

planning::FlopsModel Trainer::build_model(int64_t tokenizer_vocab) {
  const bool bert = recipe_.model.arch == "bert";
  std::optional<models::GPTSpec> gpt;
  std::optional<models::BertSpec> bert_spec;
  if (bert) {
    bert_spec = bert_spec_from_recipe(recipe_, tokenizer_vocab, tp_->size());
  } else {
    gpt = gpt_spec_from_recipe(recipe_, tokenizer_vocab, tp_->size());
  }
  const TransformerSpec& t = bert ? bert_spec->transformer : gpt->transformer;
  const bool tied = bert || gpt->tie_embeddings;
  // Virtual stage v = chunk * pp + stage holds the v-th group of layers: an even split or
  // parallel.pipeline_layers (one count per virtual stage, in layer order).
  const int64_t pp = pp_->size(), vpp = recipe_.parallel.virtual_stages();
  const int64_t stages = pp * vpp, L = t.num_layers;
  std::vector<int64_t> counts = recipe_.parallel.pipeline_layers;
  if (counts.empty()) {
    MT_INPUT_CHECK(L % stages == 0, recipe_.source_path, ": model.num_layers ", L,
                   " does not split evenly over ", stages,
                   " pipeline stages (set parallel.pipeline_layers)");
    counts.assign(static_cast<size_t>(stages), L / stages);
  }
  MT_INPUT_CHECK(static_cast<int64_t>(counts.size()) == stages, recipe_.source_path,
                 ": parallel.pipeline_layers has ", counts.size(), " entries for ", stages,
                 " (virtual) pipeline stages");
  // One recompute workspace for every chunk of this rank (it holds nothing between calls).
  std::shared_ptr<RecomputeWorkspace> workspace;
  if (t.recompute != Recompute::None) workspace = std::make_shared<RecomputeWorkspace>();
  for (int64_t c = 0; c < vpp; ++c) {
    const int64_t v = c * pp + pp_->rank();
    models::ModelStage stage;
    for (int64_t i = 0; i < v; ++i) stage.first_layer += counts[static_cast<size_t>(i)];
    stage.num_layers = counts[static_cast<size_t>(v)];
    stage.pre_process = v == 0;
    stage.post_process = v == stages - 1;
    if (bert)
      chunks_.push_back(
          std::make_unique<models::BertModel>(*bert_spec, store_, *tp_, stage, workspace));
    else
      chunks_.push_back(std::make_unique<models::GPTModel>(*gpt, store_, *tp_, stage, workspace));
  }
  act_ = chunks_.front()->make_activations();
  if (pp > 1) {
    const int64_t rows = t.sequence_parallel ? t.seq_length / tp_->size() : t.seq_length;
    std::vector<const models::Model*> chunks;
    for (const auto& c : chunks_) chunks.push_back(c.get());
    pipeline_ = std::make_unique<PipelineRuntime>(chunks, *pp_, rows, t.hidden);
    const auto& p = recipe_.parallel;
    const auto kind = p.virtual_pipeline && vpp > 1 ? pipeline::ScheduleKind::Interleaved
                                                    : pipeline::ScheduleKind::OneFOneB;
    schedule_actions_ = pipeline::make_schedule(kind, static_cast<int>(pp),
                                                static_cast<int>(num_micro_), static_cast<int>(vpp))
                            .ranks[static_cast<size_t>(pp_->rank())];
    // The last stage's tied LM-head copy is not counted again in the gradient norm.
    for (const auto& c : chunks_)
      if (Parameter* w = c->word_embeddings(); w && !c->stage().pre_process && tied)
        w->shared_copy = true;
  }
  if (!recipe_.logging.timeline.empty())
    timeline_ = std::make_unique<pipeline::TimelineRecorder>(world_->rank());
  return bert ? flops_model_from_spec(bert_spec->transformer, bert_spec->padded_vocab_size)
              : flops_model_from_spec(*gpt);
}

models::MicroBatch Trainer::on_device(const models::MicroBatch& mb) const {
  // The sources fill host tensors; a device run copies each field (to() is the tensor itself on
  // its own device, so the CPU path keeps using the host batch).
  if (device_ == Device::CPU) return mb;
  auto move = [this](const Tensor& t) { return models::present(t) ? t.to(device_) : t; };
  models::MicroBatch out;
  out.tokens = move(mb.tokens);
  out.labels = move(mb.labels);
  out.token_types = move(mb.token_types);
  out.padding_mask = move(mb.padding_mask);
  out.nsp_labels = move(mb.nsp_labels);
  out.info = mb.info;
  return out;
}

void Trainer::fill(int64_t first_sample, const BatchSource& source, int64_t iteration,
                   int64_t position, bool training, models::MicroBatch& mb) const {
  source.fill(first_sample, recipe_.training.micro_batch_size, mb);
  mb.info = MicroBatchInfo{iteration, position, training};
  check_ids_in_vocabulary(mb, vocab_size_, first_sample, [&] {
    return concat(training ? "training" : "validation", " data (data.train: ",
                  recipe_.data.mock ? std::string("mock") : data_paths(recipe_.data.train), ")");
  });
}

void Trainer::reduce_tied_embedding_grads() {
  // First and last stage each hold the word embeddings (input table and tied LM head): sum
  // their gradients so both copies take the same step (Megatron's embedding group).
  const bool tied = recipe_.model.tie_embeddings || recipe_.model.arch == "bert";
  if (pp_->size() == 1 || !tied || embedding_->size() == 1) return;
  for (const auto& c : chunks_) {
    Parameter* w = c->word_embeddings();
    if (w && (c->stage().pre_process || c->stage().post_process)) {
      embedding_->all_reduce(w->grad, parallel::ReduceOp::Sum);
      return;
    }
  }
}

std::pair<double, double> Trainer::global_target_counts(
    const std::vector<models::MicroBatch>& batches) {
  double counts[2] = {0.0, 0.0};
  for (const models::MicroBatch& mb : batches) {
    counts[0] += static_cast<double>(models::count_lm_targets(mb));
    counts[1] += static_cast<double>(models::count_aux_targets(mb));
  }
  // Every tp/pp rank of a data-parallel replica reads the same samples: sum over dp only.
  Tensor t = Tensor::wrap(counts, {2}, DType::F64);
  optim::all_reduce_host(*dp_, t, parallel::ReduceOp::Sum, device_);
  return {counts[0], counts[1]};
}

StepMetrics Trainer::train_step(int64_t iteration) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto& tr = recipe_.training;
  const int64_t mbs = tr.micro_batch_size, G = tr.global_batch_size, S = recipe_.model.seq_length;
  const int64_t base = sample_offset_ + (iteration - 1) * G;

  const PretrainingSampler sampler{mbs, dp_size_, dp_rank_};
  batches_.resize(static_cast<size_t>(num_micro_));
  for (int64_t m = 0; m < num_micro_; ++m)
    fill(sampler.first_sample(base, m), *train_, iteration, sampler.position(m), true,
         batches_[static_cast<size_t>(m)]);
  // Normalise by the predicted tokens (and sentence pairs) of the whole global batch, so any
  // micro-batching and data-parallel split gives the same mean and the same gradients.
  const auto [lm_targets, aux_targets] = global_target_counts(batches_);
  device_batches_.resize(batches_.size());
  for (size_t m = 0; m < batches_.size(); ++m) device_batches_[m] = on_device(batches_[m]);
  MT_CHECK(lm_targets > 0, "iteration ", iteration, ": the global batch has no predicted token");
  const double scale = scaler_->scale();
  const models::LossWeights weights{
      static_cast<float>(scale / lm_targets),
      aux_targets > 0 ? static_cast<float>(scale / aux_targets) : 0.0f};

  store_.zero_grads();
  models::LossSums sums;
  if (pipeline_) {
    const PipelineRuntime::FillMicroBatch fill_mb = [&](int m, models::MicroBatch& mb) {
      mb = device_batches_[static_cast<size_t>(m)];
    };
    sums = pipeline_->run(schedule_actions_, fill_mb, weights, timeline_.get());
    reduce_tied_embedding_grads();
  } else {
    const models::Model::GradsReady on_ready = [this](int64_t w) {
      grad_sync_->grads_ready_below(w);
    };
    auto& model = *chunks_.front();
    for (int64_t m = 0; m < num_micro_; ++m) {
      const models::MicroBatch& mb = device_batches_[static_cast<size_t>(m)];
      std::optional<pipeline::TimelineRecorder::Scope> scope;
      if (timeline_) scope.emplace(*timeline_, pipeline::ActionKind::Forward, m, 0);
      sums += model.forward(*act_, mb);
      scope.reset();
      if (timeline_) scope.emplace(*timeline_, pipeline::ActionKind::Backward, m, 0);
      const bool last = m + 1 == num_micro_;
      if (last) grad_sync_->begin_last_backward();
      model.backward(*act_, mb, weights, last ? on_ready : models::Model::GradsReady{});
    }
  }
  grad_sync_->finish();
  reduce_sequence_parallel_grads();
  StepMetrics metrics;
  metrics.iteration = iteration;
  const models::LossSums total = reduce_losses(sums);
  metrics.lm_loss = total.lm / lm_targets;
  metrics.has_aux = aux_targets > 0;
  metrics.aux_loss = metrics.has_aux ? total.aux / aux_targets : 0.0;
  metrics.loss = metrics.lm_loss + metrics.aux_loss;
  metrics.loss_scale = scale;
  // Norm of the scaled gradients; every rank gets the same value, so all agree on overflow.
  const double scaled_norm =
      optim::global_grad_norm(optimizer_->segments(), tp_->rank(), *model_group_,
                              grad_sync_->distributed() ? dp_ : nullptr);
  metrics.grad_norm = scaled_norm / scale;
  MT_CHECK(std::isfinite(metrics.loss), "iteration ", iteration, ": non-finite loss ", metrics.loss,
           " (lower optimizer.lr)");
  metrics.lr = schedule_.lr(iteration);
  if (!std::isfinite(scaled_norm) || fp16_gradient_overflow()) {
    MT_CHECK(scaler_->dynamic(), "iteration ", iteration, ": non-finite gradient norm ",
             scaled_norm, " (lower optimizer.lr or enable clipping)");
    metrics.skipped = true;  // fp16 overflow: skip the update, back off the scale
    scaler_->update(true);
  } else {
    // Unscale and clip in one pass over the gradients.
    double factor = 1.0 / scale;
    const double clip = recipe_.optimizer.clip_grad;
    if (clip > 0.0 && metrics.grad_norm > clip) factor *= clip / (metrics.grad_norm + 1e-6);
    if (factor != 1.0) optim::scale_grads(optimizer_->segments(), factor);
    optimizer_->step(metrics.lr);
    grad_sync_->gather_params();
    scaler_->update(false);
  }

  // On a device the step's last kernels (AdamW, casts) may still be queued: a one-element
  // device-to-host copy waits for them, so the step time covers the whole step.
  if (device_ != Device::CPU) (void)store_.masters().flat_view(0, {1}).to(Device::CPU);
  metrics.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  metrics.tokens_per_s = static_cast<double>(G * S) / metrics.seconds;
  metrics.tflops = flops_per_step_ / metrics.seconds / 1e12 / world_->size();
  metrics.mfu = peak_.peak_flops > 0 ? metrics.tflops * 1e12 / peak_.peak_flops : 0.0;
  metrics.of_gemm = peak_.gemm_flops > 0 ? metrics.tflops * 1e12 / peak_.gemm_flops : 0.0;
  return metrics;
}

bool Trainer::fp16_gradient_overflow() {
  if (store_.model_dtype() != DType::F16) return false;
  // An overflow in the fp16 activations or their gradients reaches the fp32 main gradients as
  // inf/NaN; a main gradient beyond fp16's largest finite value (accumulated in fp32) would not
  // survive an fp16 copy either. Both count as overflow, on every device (an op).
  constexpr float kFp16Max = 65504.0f;
  float overflow = 0.0f;
  for (const optim::Segment& s : optimizer_->segments()) {
    const Tensor g = store_.grads().flat_view(s.param->offset + s.begin, {s.end - s.begin});
    if (ops::count_outside(g, kFp16Max) > 0) {
      overflow = 1.0f;
      break;
    }
  }
  Tensor flag = Tensor::wrap(&overflow, {1}, DType::F32);
  optim::all_reduce_host(*model_group_, flag, parallel::ReduceOp::Max, device_);
  if (grad_sync_->distributed())
    optim::all_reduce_host(*dp_, flag, parallel::ReduceOp::Max, device_);
  return overflow > 0.0f;
}

void Trainer::reduce_sequence_parallel_grads() {
  if (tp_->size() == 1) return;
  // Norms (and position embeddings) saw only this rank's sequence slice: sum their partial
  // gradients over tensor parallel, in one call over a packed copy. Summing after the
  // data-parallel reduction is the same sum.
  int64_t n = 0;
  for (const optim::Segment& s : optimizer_->segments())
    if (s.param->tp_partial_grad) n += s.end - s.begin;
  if (n == 0) return;
  ensure(sp_grad_scratch_, {n}, DType::F32, device_);
  auto grad_of = [&](const optim::Segment& s) {
    return store_.grads().flat_view(s.param->offset + s.begin, {s.end - s.begin});
  };
  int64_t at = 0;
  for (const optim::Segment& s : optimizer_->segments()) {
    if (!s.param->tp_partial_grad) continue;
    sp_grad_scratch_.flat_view(at, {s.end - s.begin}).copy_from(grad_of(s));
    at += s.end - s.begin;
  }
  tp_->all_reduce(sp_grad_scratch_, parallel::ReduceOp::Sum);
  at = 0;
  for (const optim::Segment& s : optimizer_->segments()) {
    if (!s.param->tp_partial_grad) continue;
    grad_of(s).copy_from(sp_grad_scratch_.flat_view(at, {s.end - s.begin}));
    at += s.end - s.begin;
  }
}

models::LossSums Trainer::reduce_losses(const models::LossSums& local) {
  // The losses are on the last pipeline stage; sum them there over pp, then over dp.
  double v[2] = {local.lm, local.aux};
  Tensor t = Tensor::wrap(v, {2}, DType::F64);
  optim::all_reduce_host(*pp_, t, parallel::ReduceOp::Sum, device_);
  optim::all_reduce_host(*dp_, t, parallel::ReduceOp::Sum, device_);
  return {v[0], v[1]};
}

EvalMetrics Trainer::evaluate(int64_t iteration) {
  const auto& tr = recipe_.training;
  const int64_t mbs = tr.micro_batch_size;
  const int64_t samples = std::max<int64_t>(tr.eval_iters, 1) * tr.global_batch_size;
  // The same validation samples every time, so evaluations compare directly.
  const PretrainingSampler sampler{mbs, dp_size_, dp_rank_};
  const int64_t rounds = sampler.rounds(samples);
  std::vector<models::MicroBatch> batches(static_cast<size_t>(rounds));
  for (int64_t m = 0; m < rounds; ++m)
    fill(sampler.first_sample(0, m), *valid_, iteration, sampler.position(m), false,
         batches[static_cast<size_t>(m)]);
  const auto [lm_targets, aux_targets] = global_target_counts(batches);
  for (models::MicroBatch& mb : batches) mb = on_device(mb);
  models::LossSums sums;
  if (pipeline_) {
    const PipelineRuntime::FillMicroBatch fill_mb = [&](int m, models::MicroBatch& mb) {
      mb = batches[static_cast<size_t>(m)];
    };
    sums = pipeline_->forward_only(static_cast<int>(rounds), fill_mb);
  } else {
    for (const models::MicroBatch& mb : batches) sums += chunks_.front()->forward(*act_, mb);
  }
  const models::LossSums total = reduce_losses(sums);
  EvalMetrics e;
  e.iteration = iteration;
  e.loss = lm_targets > 0 ? total.lm / lm_targets : 0.0;
  e.perplexity = std::exp(std::min(e.loss, 80.0));
  e.has_aux = aux_targets > 0;
  e.aux_loss = e.has_aux ? total.aux / aux_targets : 0.0;
  return e;
}

void Trainer::log_step(const StepMetrics& m, bool to_console) {
  if (!is_logger_) return;
  if (to_console)
    *log_ << "iter " << std::setw(6) << m.iteration << "/" << recipe_.training.train_iters
          << " | loss " << std::fixed << std::setprecision(4) << m.loss;
  if (to_console && m.has_aux) *log_ << " (lm " << m.lm_loss << " + nsp " << m.aux_loss << ")";
  if (to_console)
    *log_ << " | lr " << std::scientific << std::setprecision(3) << m.lr << " | grad_norm "
          << std::fixed << std::setprecision(3) << m.grad_norm << " | " << std::setprecision(1)
          << m.seconds * 1000 << " ms | " << std::setprecision(0) << m.tokens_per_s << " tok/s | "
          << std::setprecision(3) << m.tflops << " TFLOP/s | MFU " << std::setprecision(1)
          << m.mfu * 100 << "%" << of_gemm_text(m.of_gemm) << " | mem " << std::setprecision(0)
          << static_cast<double>(memory_stats(device_).peak_bytes) / 1048576.0 << " MiB"
          << (m.skipped ? " | skipped (fp16 overflow)" : "") << std::defaultfloat << "\n"
          << std::flush;
  if (jsonl_.is_open()) {
    nlohmann::json j = {{"iteration", m.iteration},
                        {"loss", m.loss},
                        {"lm_loss", m.lm_loss},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"step_seconds", m.seconds},
                        {"tokens_per_s", m.tokens_per_s},
                        {"tflops", m.tflops},
                        {"mfu", m.mfu},
                        {"of_gemm", m.of_gemm},
                        {"loss_scale", m.loss_scale},
                        {"skipped", m.skipped}};
    if (m.has_aux) j["nsp_loss"] = m.aux_loss;
    jsonl_ << j.dump() << "\n" << std::flush;
  }
  if (tensorboard_) {
    auto& tb = *tensorboard_;
    tb.add_scalar("lm loss", m.iteration, m.lm_loss);
    if (m.has_aux) tb.add_scalar("nsp loss", m.iteration, m.aux_loss);
    tb.add_scalar("learning-rate", m.iteration, m.lr);
    tb.add_scalar("grad-norm", m.iteration, m.grad_norm);
    tb.add_scalar("loss-scale", m.iteration, m.loss_scale);
    tb.add_scalar("tokens-per-sec", m.iteration, m.tokens_per_s);
    tb.add_scalar("tflops", m.iteration, m.tflops);
    tb.add_scalar("mfu", m.iteration, m.mfu);
    tb.flush();
  }
}

void Trainer::log_eval(const EvalMetrics& e) {
  if (!is_logger_) return;
  *log_ << "validation at iter " << e.iteration << " | val_loss " << std::fixed
        << std::setprecision(4) << e.loss << " | val_ppl " << std::setprecision(2) << e.perplexity;
  if (e.has_aux) *log_ << " | val_nsp_loss " << std::setprecision(4) << e.aux_loss;
  *log_ << std::defaultfloat << "\n" << std::flush;
  if (jsonl_.is_open()) {
    nlohmann::json j = {
        {"iteration", e.iteration}, {"val_loss", e.loss}, {"val_ppl", e.perplexity}};
    if (e.has_aux) j["val_nsp_loss"] = e.aux_loss;
    jsonl_ << j.dump() << "\n" << std::flush;
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("lm loss validation", e.iteration, e.loss);
    if (e.has_aux) tensorboard_->add_scalar("nsp loss validation", e.iteration, e.aux_loss);
    tensorboard_->flush();
  }
}

bool Trainer::should_stop(double elapsed_minutes) {
  const auto& limit = recipe_.training.exit_duration_minutes;
  float stop = exit_signal_received() || (limit && elapsed_minutes >= *limit) ? 1.0f : 0.0f;
  // Every rank must stop at the same step: agree on the flag.
  if (world_->size() > 1) {
    Tensor t = Tensor::wrap(&stop, {1}, DType::F32);
    world_->all_reduce(t, parallel::ReduceOp::Max);
  }
  return stop > 0.0f;
}

TrainSummary Trainer::run() {
  const auto& tr = recipe_.training;
  const auto& ck = recipe_.checkpoint;
  const auto start_time = std::chrono::steady_clock::now();
  install_exit_signal_handlers();
  const int64_t interval = std::max<int64_t>(recipe_.logging.interval, 1);
  const bool eval_enabled = tr.eval_iters > 0 && valid_ != nullptr;
  TrainSummary summary;
  summary.start_iteration = load_checkpoint();
  summary.last_iteration = summary.start_iteration;
  if (eval_enabled && summary.start_iteration == 0)
    log_eval(summary.evals.emplace_back(evaluate(0)));
  int64_t last_saved = summary.start_iteration;
  for (int64_t it = summary.start_iteration + 1; it <= tr.train_iters; ++it) {
    const StepMetrics m = train_step(it);
    summary.steps.push_back(m);
    summary.last_iteration = it;
    log_step(m, it % interval == 0 || it == 1 || it == tr.train_iters);
    const bool periodic = tr.eval_interval > 0 && it % tr.eval_interval == 0;
    if (eval_enabled && (periodic || it == tr.train_iters))
      log_eval(summary.evals.emplace_back(evaluate(it)));
    if (!ck.save.empty() && ck.save_interval && it % *ck.save_interval == 0) {
      save_checkpoint(it);
      last_saved = it;
    }
    const double minutes =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count() / 60.0;
    if (it < tr.train_iters && should_stop(minutes)) {
      summary.stopped_early = true;
      if (is_logger_)
        *log_ << "stopping at iteration " << it
              << (exit_signal_received() ? " (signal received)" : " (exit_duration_minutes)")
              << "\n"
              << std::flush;
      break;
    }
  }
  if (!ck.save.empty() && summary.last_iteration > last_saved)
    save_checkpoint(summary.last_iteration);
  if (timeline_) {
    const std::string path = config::resolve_path(recipe_, recipe_.logging.timeline) + ".rank" +
                             std::to_string(world_->rank()) + ".jsonl";
    pipeline::write_timeline_jsonl(path, timeline_->events());
    if (is_logger_) *log_ << "timeline written to " << path << " (and the other ranks')\n";
  }
  return summary;
}

}  // namespace megatron::training
