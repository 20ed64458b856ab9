#include "megatron/training/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <utility>

#include "megatron/backend/ops.h"
#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/save_lock.h"
#include "megatron/training/checkpoint_pieces.h"
#include "megatron/training/elastic.h"
#include "megatron/training/pretrained.h"
#include "megatron/transformer/lora.h"

namespace megatron::training {
namespace ckpt = megatron::checkpoint;

namespace {

// "1.23 s"
std::string fixed_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

namespace {

// The checkpoint's model tensors that no rank of the run asked for (e.g. the layers of a deeper
// model): each rank marks the ones its stage uses, the marks are combined over all ranks.
std::vector<std::string> unused_model_tensors(const ckpt::CheckpointIndex& index,
                                              const std::set<std::string>& used,
                                              parallel::Communicator& world) {
  std::vector<std::string> names;
  for (const auto& [name, saved] : index.tensors)
    if (name.rfind("model/", 0) == 0) names.push_back(name);
  Tensor marks = Tensor::zeros({static_cast<int64_t>(names.size())}, DType::F32, Device::CPU);
  for (size_t i = 0; i < names.size(); ++i)
    if (used.count(names[i])) marks.data<float>()[i] = 1.0f;
  if (world.size() > 1 && !names.empty()) world.all_reduce(marks, parallel::ReduceOp::Max);
  std::vector<std::string> unused;
  for (size_t i = 0; i < names.size(); ++i)
    if (marks.data<float>()[i] == 0.0f) unused.push_back(names[i]);
  return unused;
}

}  // namespace

std::string Checkpointer::residual_key(const std::string& name) const {
  return concat("grad_compression/tp", tp_->size(), ".pp", pp_->size(), ".dp", dp_->size(),
                ".world", world_->size(), "/rank", world_->rank(), ".", name);
}

Checkpointer::Checkpointer(const config::Recipe& recipe, const TrainerGroups& groups,
                           const TrainingState& state, int64_t vocab_size, int64_t padded_vocab,
                           std::ostream* log)
    : recipe_(recipe),
      world_(groups.world),
      tp_(groups.tp),
      pp_(groups.pp),
      dp_(groups.dp),
      store_(*state.store),
      optimizer_(state.optimizer),
      grad_sync_(state.grad_sync),
      moe_(state.moe),
      expert_dp_(groups.expert_dp ? groups.expert_dp : groups.dp),
      experts_fold_tp_(groups.experts_fold_tp()),
      scaler_(state.scaler),
      schedule_(*state.schedule),
      vocab_size_(vocab_size),
      padded_vocab_(padded_vocab),
      log_(log) {
  // One run per save directory: world rank 0 holds the lock, every rank learns the outcome.
  if (recipe_.checkpoint.save.empty()) return;
  if (recipe_.checkpoint.async_save) async_ = std::make_unique<ckpt::AsyncSave>();
  const std::string dir = config::resolve_output_path(recipe_.checkpoint.save);
  std::string error;
  if (world_->rank() == 0) {
    try {
      save_lock_ = std::make_unique<ckpt::SaveDirLock>(dir);
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  float failed = error.empty() ? 0.0f : 1.0f;
  if (world_->size() > 1) {
    Tensor flag = Tensor::wrap(&failed, {1}, DType::F32);
    world_->all_reduce(flag, parallel::ReduceOp::Max);
  }
  MT_INPUT_CHECK(failed == 0.0f, recipe_.source_path, ": ",
                 error.empty() ? concat("checkpoint.save: '", dir,
                                        "' is in use by another run (world rank 0 says which)")
                               : error);
}

Checkpointer::HostBuffers Checkpointer::host_buffers(bool weights_only) {
  HostBuffers h;
  // Asynchronous saves stage device tensors in page-locked host buffers kept from save to save
  // (the copy runs at full bus speed and is the snapshot itself: see save()).
  const bool pinned = async_ != nullptr && store_.device() != Device::CPU;
  size_t next_pinned = 0;
  auto stage = [&](Tensor& t) -> float* {
    if (!t.defined() || t.numel() == 0) return nullptr;
    if (t.device() == Device::CPU && t.dtype() == DType::F32) return t.data<float>();
    Tensor wide = t;
    if (t.dtype() != DType::F32) {
      wide = Tensor::empty(t.shape(), DType::F32, t.device());
      ops::cast(t, wide);
    }
    if (!pinned || t.device() == Device::CPU) {
      h.staged.emplace_back(&t, wide.to(Device::CPU));
      return h.staged.back().second.data<float>();
    }
    const size_t bytes = static_cast<size_t>(t.numel()) * sizeof(float);
    if (next_pinned == pinned_staging_.size()) pinned_staging_.emplace_back();
    PinnedHostBuffer& buffer = pinned_staging_[next_pinned++];
    if (buffer.bytes() != bytes) buffer = PinnedHostBuffer(bytes, t.device());
    Tensor host = Tensor::wrap(buffer.data(), t.shape(), DType::F32);
    host.copy_from(wide);
    h.staged.emplace_back(&t, host);
    return host.data<float>();
  };
  h.weights = stage(store_.weights());
  if (weights_only) return h;
  h.masters = store_.mixed_precision() ? stage(store_.masters()) : h.weights;
  h.exp_avg = stage(optimizer_->exp_avg());
  h.exp_avg_sq = stage(optimizer_->exp_avg_sq());
  if (store_.host_masters().defined() && store_.host_masters().numel() > 0) {
    h.host_masters = store_.host_masters().data<float>();
    h.host_exp_avg = optimizer_->host_exp_avg()->data<float>();
    h.host_exp_avg_sq = optimizer_->host_exp_avg_sq()->data<float>();
  }
  return h;
}

void Checkpointer::write_back(const HostBuffers& host) {
  for (const auto& [target, staged] : host.staged) {
    if (target->dtype() == DType::F32) {
      target->copy_from(staged);
      continue;
    }
    Tensor& dst = *target;
    ops::cast(staged.to(dst.device()), dst);
  }
}

std::string Checkpointer::checkpoint_dir(const std::string& dir) const {
  return config::resolve_path(recipe_, dir);
}

void Checkpointer::save(int64_t iteration, int64_t sample_offset) {
  const auto& c = recipe_.checkpoint;
  MT_CHECK(!c.save.empty(), "save_checkpoint without checkpoint.save");
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [](auto start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (async_) finish_async(/*wait=*/true);  // one save in flight at a time
  HostBuffers host;
  ckpt::SaveRequest req = save_request(iteration, sample_offset, host);
  const std::string path = ckpt::checkpoint_path(req.dir, iteration);
  if (!async_) {
    ckpt::save(req, *world_, static_cast<int>(c.keep_last), resumed_from_);
    if (log_)
      *log_ << "saved checkpoint " << path << " (training blocked " << fixed_seconds(since(t0))
            << ")\n"
            << std::flush;
    return;
  }
  // Pieces in staged host copies are private to this save: written from there, not copied
  // into the snapshot again.
  for (ckpt::TensorPiece& p : req.pieces)
    for (const auto& [target, staged] : host.staged) {
      const float* begin = staged.data<float>();
      if (p.data >= begin && p.data < begin + staged.numel()) p.stable = true;
    }
  for (const auto& [target, staged] : host.staged) req.keep_alive.push_back(staged);
  async_->start(std::move(req), *world_);
  async_blocked_s_ = since(t0);
  if (log_)
    *log_ << "checkpoint iteration " << iteration << ": copied to host memory in "
          << fixed_seconds(async_blocked_s_) << ", writing " << path << " in the background\n"
          << std::flush;
}

void Checkpointer::finish_async(bool wait, bool at_exit) {
  if (!async_->pending()) return;
  const auto t0 = std::chrono::steady_clock::now();
  const bool done =
      async_->finish(*world_, wait, static_cast<int>(recipe_.checkpoint.keep_last), resumed_from_);
  const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // A wait at the end of the run holds up no training: reported apart.
  if (!at_exit) async_blocked_s_ += spent;
  if (!done || !log_) return;
  // Printed once the checkpoint is durable (written, fsynced and committed).
  const auto& req = async_->request();
  *log_ << "saved checkpoint " << ckpt::checkpoint_path(req.dir, req.iteration)
        << " (written in the background in " << fixed_seconds(async_->write_seconds())
        << "; training blocked " << fixed_seconds(async_blocked_s_);
  if (at_exit) *log_ << "; the end of the run waited " << fixed_seconds(spent) << " for it";
  *log_ << ")\n" << std::flush;
}

void Checkpointer::prepare_saves() {
  // Counting the pieces builds their host views: free on the CPU (the buffers themselves), a
  // whole staged copy of the weights, masters and moments on a device, which start-up should not
  // pay for; there the first save allocates its snapshot.
  if (!async_ || store_.device() != Device::CPU) return;
  HostBuffers host;
  const ckpt::SaveRequest req = save_request(0, 0, host);
  int64_t floats = 0;
  for (const ckpt::TensorPiece& p : req.pieces) floats += p.geometry().count();
  async_->reserve(floats);
}

void Checkpointer::poll() {
  if (async_) finish_async(/*wait=*/false);
}

void Checkpointer::finish_saves() {
  if (async_) finish_async(/*wait=*/true, /*at_exit=*/true);
}

ckpt::SaveRequest Checkpointer::save_request(int64_t iteration, int64_t sample_offset,
                                             HostBuffers& host) {
  const auto& c = recipe_.checkpoint;
  const bool mixed = store_.mixed_precision();
  // Model weights: data-parallel rank 0 writes them whole, or (weights sharded) every rank of the
  // first replica its owned segments; tensor-parallel replicas only from tp rank 0
  // (write_this_rank_replicas); pipeline copies of tied weights are not written. Optimizer
  // segments: every rank's own shards with a sharded optimizer (first replica), otherwise
  // data-parallel rank 0's. Expert weights (MoE) differ over ep: they and their segments are
  // written the same way by expert-data-parallel rank 0 (or every expert dp rank); whole
  // experts under tp > 1 differ over the tp ranks folded into ep, so each of those writes its.
  ckpt::SaveRequest req;
  req.dir = config::resolve_output_path(c.save);
  req.iteration = iteration;
  req.write_this_rank_replicas = true;  // decided per piece below
  auto writes_replicas = [&](const Parameter& p) {
    return tp_->rank() == 0 || (p.expert && experts_fold_tp_);
  };
  const bool write_segments =
      grad_sync_->dense_sharded() ? grad_sync_->first_replica() : dp_->rank() == 0;
  const bool write_expert_segments = store_.expert_begin() < store_.trainable_numel() &&
                                     (grad_sync_->expert_sharded() || expert_dp_->rank() == 0);
  auto writes_param = [&](const Parameter& p) {
    return (!p.shard.replicated() || writes_replicas(p)) &&
           (p.expert ? expert_dp_->rank() == 0 : dp_->rank() == 0);
  };
  auto writes_segment = [&](const optim::Segment& s) {
    return !s.param->shared_copy && (!s.param->shard.replicated() || writes_replicas(*s.param)) &&
           (s.param->expert ? write_expert_segments : write_segments);
  };
  const bool weights_sharded = store_.sharding().weights;
  // Host views of the buffers (the buffers themselves on the CPU; staged copies on a device).
  host = host_buffers(!write_segments && !write_expert_segments);
  if (weights_sharded) {
    for (const auto* segs : {&store_.segments(), &store_.frozen_segments()})
      for (const optim::Segment& s : *segs)
        if (writes_segment(s))
          req.pieces.push_back(segment_piece(s, "model/", host.weights + s.weight_at));
  } else {
    for (Parameter* p : store_.params())
      if (!p->shared_copy && writes_param(*p))
        req.pieces.push_back(param_piece(*p, "model/", host.weights + p->offset));
  }
  if (moe_ != nullptr && dp_->rank() == 0 && tp_->rank() == 0)
    for (auto& [layer, bias] : moe_->all_expert_bias())
      req.pieces.push_back(expert_bias_piece(layer, bias));
  for (auto [name, residual] : grad_sync_->compression_residuals())
    req.pieces.push_back(residual_piece(residual_key(name), residual));
  for (const optim::Segment& s : optimizer_->segments()) {
    if (!writes_segment(s)) continue;
    if (mixed) req.pieces.push_back(segment_piece(s, "master/", host.master_of(s)));
    req.pieces.push_back(segment_piece(s, "optim/exp_avg/", host.exp_avg_of(s)));
    if (float* sq = host.exp_avg_sq_of(s))
      req.pieces.push_back(segment_piece(s, "optim/exp_avg_sq/", sq));
  }
  req.metadata = save_metadata(iteration, sample_offset);
  return req;
}

nlohmann::json Checkpointer::save_metadata(int64_t iteration, int64_t sample_offset) const {
  const int64_t consumed = sample_offset + iteration * recipe_.training.global_batch_size;
  return {{"recipe", recipe_for_metadata()},
          {"iteration", iteration},
          {"consumed_samples", consumed},
          {"optimizer_steps", optimizer_->steps_taken()},
          {"optimizer_type", std::string(config::option_name(recipe_.optimizer.type))},
          {"lr_schedule",
           {{"max_lr", schedule_.max_lr},
            {"min_lr", schedule_.min_lr},
            {"warmup_iters", schedule_.warmup_iters},
            {"decay_iters", schedule_.decay_iters},
            {"decay", std::string(config::option_name(recipe_.optimizer.schedule.decay))},
            {"lr_at_iteration", schedule_.lr(iteration)}}},
          {"rng",
           {{"kind", "philox4x32-10 counter-based"},
            {"seed", recipe_.training.seed},
            {"note", "dropout and init streams are functions of (seed, iteration)"}}},
          {"data", {{"consumed_samples", consumed}, {"seed", recipe_.training.seed}}},
          {"loss_scaler", scaler_->state()},
          {"model", {{"vocab_size", vocab_size_}, {"padded_vocab_size", padded_vocab_}}},
          {"layout",
           {{"tp", tp_->size()},
            {"pp", pp_->size()},
            {"dp", dp_->size()},
            {"distributed_optimizer", grad_sync_->dense_sharded()},
            {"sharding_strategy", std::string(config::option_name(recipe_.sharding_strategy()))},
            {"distributed_optimizer_instances",
             recipe_.parallel.num_distributed_optimizer_instances}}}};
}

nlohmann::json Checkpointer::recipe_for_metadata() const {
  // Tokenizer files as absolute paths, so tools reading the checkpoint (generate) find them
  // from any working directory.
  config::Recipe r = recipe_;
  auto& t = r.data.tokenizer;
  for (std::string* f : {&t.vocab_file, &t.merge_file, &t.model})
    if (!f->empty())
      *f = std::filesystem::absolute(config::resolve_path(recipe_, *f)).lexically_normal().string();
  return r.to_json();
}

Checkpointer::Resume Checkpointer::load() {
  const auto& c = recipe_.checkpoint;
  // checkpoint.load, or (auto-resume after a requeue) a checkpoint already in checkpoint.save;
  // checkpoint.pretrained only when neither holds one (so a restarted job resumes its saves).
  const bool has_pretrained = !c.pretrained.empty();
  auto holds_checkpoint = [](const std::string& dir) {
    return ckpt::latest_iteration(dir).has_value() ||
           std::filesystem::exists(std::filesystem::path(dir) / "metadata.json");
  };
  if (!c.load.empty()) {
    const std::string dir = checkpoint_dir(c.load);
    if (holds_checkpoint(dir)) return load_from(dir, c.finetune);
    MT_INPUT_CHECK(has_pretrained, recipe_.source_path,
                   ": checkpoint.load: no complete checkpoint in '", dir, "'");
  }
  if (!c.save.empty() && ckpt::latest_iteration(config::resolve_output_path(c.save)))
    return load_from(config::resolve_output_path(c.save), false);
  if (!has_pretrained) return {};
  // A Hugging Face directory is converted next to the saves (shared by every node), else in
  // the temporary directory (one node), and removed once loaded.
  const std::filesystem::path scratch =
      c.save.empty()
          ? agreed_temp_dir(*world_, "megatron_pretrained_")
          : std::filesystem::path(config::resolve_output_path(c.save)) / ".pretrained_import";
  const std::string pretrained = config::resolve_path(recipe_, c.pretrained);
  if (world_->rank() == 0 && is_hf_directory(pretrained)) std::filesystem::remove_all(scratch);
  const std::string dir =
      native_pretrained_dir(recipe_, pretrained, scratch.string(), *world_, log_);
  load_from(dir, true);
  world_->barrier();
  if (world_->rank() == 0 && dir == scratch.string()) std::filesystem::remove_all(scratch);
  return {};
}

// The pieces one load reads, each checked against the checkpoint's index as it is asked for:
// a tensor of another shape is an error naming it (only a vocabulary table's padding rows may
// differ, for the same real vocabulary), a missing one is left for the loader to name.
class LoadPieces {
 public:
  LoadPieces(const ckpt::CheckpointIndex& index, int64_t vocab_size, int64_t padded_vocab)
      : index_(index), vocab_size_(vocab_size), padded_vocab_(padded_vocab) {
    // The real vocabulary the checkpoint was trained with (-1: a checkpoint from before it was
    // recorded; its vocabulary tables then load only with identical padding).
    const auto& m = index.metadata;
    if (m.contains("model") && m["model"].contains("vocab_size") &&
        m["model"]["vocab_size"].is_number_integer())
      saved_vocab_ = m["model"]["vocab_size"].get<int64_t>();
  }
  bool has(const std::string& name) const { return index_.tensors.count(name) > 0; }
  bool has(const std::string& name, const Shape& shape) const {
    const auto it = index_.tensors.find(name);
    return it != index_.tensors.end() &&
           it->second.shape == std::vector<int64_t>(shape.begin(), shape.end());
  }
  void add(ckpt::TensorPiece piece) {
    auto it = index_.tensors.find(piece.name);
    if (piece.name.rfind("model/", 0) == 0) used_.insert(piece.name);
    if (it == index_.tensors.end() ||
        it->second.shape ==
            std::vector<int64_t>(piece.global_shape.begin(), piece.global_shape.end())) {
      pieces_.push_back(std::move(piece));
      return;
    }
    const bool vocab_table = piece.global_shape.ndim() >= 1 &&
                             piece.global_shape[0] == padded_vocab_ &&
                             it->second.shape.size() == size_t(piece.global_shape.ndim());
    const bool padding_only =
        vocab_table && saved_vocab_ == vocab_size_ && it->second.shape[0] >= vocab_size_;
    const std::string saved_shape = Shape(it->second.shape.begin(), it->second.shape.end()).str();
    MT_INPUT_CHECK(
        padding_only && remap_padded_rows(piece, it->second.shape, pieces_), index_.path,
        ": tensor '", piece.name, "' has shape ", saved_shape, " but this model needs ",
        piece.global_shape.str(),
        vocab_table
            ? concat(" (only vocabulary padding rows may differ: the checkpoint's vocabulary is ",
                     saved_vocab_ < 0 ? std::string("not recorded") : concat(saved_vocab_),
                     ", this model's ", vocab_size_, ")")
            : std::string(" (a checkpoint of a different model?)"));
  }
  const std::set<std::string>& used() const { return used_; }
  std::vector<ckpt::TensorPiece> take() { return std::move(pieces_); }

 private:
  const ckpt::CheckpointIndex& index_;
  int64_t vocab_size_, padded_vocab_, saved_vocab_ = -1;
  std::vector<ckpt::TensorPiece> pieces_;
  std::set<std::string> used_;  // model tensors of the checkpoint this rank reads
};

Checkpointer::Resume Checkpointer::load_from(const std::string& dir, bool weights_only) {
  const ckpt::CheckpointIndex index = ckpt::read_index(dir);
  // Never fall back to an older checkpoint in silence.
  if (log_)
    for (const std::string& why : index.skipped)
      *log_ << "warning: " << why << "; loading " << index.path << " instead\n";
  LoadPieces pieces(index, vocab_size_, padded_vocab_);
  // Load into host views of the buffers (staged copies on a device, written back below).
  const HostBuffers host = host_buffers(false);
  const Coverage coverage = check_coverage(pieces, index.path, weights_only);
  request_pieces(pieces, host, index.path, weights_only);
  report_partial_load(coverage, pieces, index);
  ckpt::LoadRequest req;
  // index.path is the iteration directory itself; checkpoint.load may name it or its parent.
  req.dir = std::filesystem::path(index.path).parent_path().string();
  req.iteration = index.iteration;
  req.pieces = pieces.take();
  const nlohmann::json meta = ckpt::load(req);
  write_back(host);
  if (store_.mixed_precision()) store_.refresh_model_weights();
  resumed_from_ = index.path;
  if (log_)
    *log_ << "loaded checkpoint " << index.path << (weights_only ? " (weights only)" : "") << "\n"
          << std::flush;
  if (weights_only) return {};
  return resume_from(meta, index.path);
}

// Parameters the checkpoint lacks: an error listing them all, or with checkpoint.strict: false
// skipped (they keep their initial values and optimizer state). LoRA adapters a base checkpoint
// cannot hold (weights only) start anew.
Checkpointer::Coverage Checkpointer::check_coverage(const LoadPieces& pieces,
                                                    const std::string& path,
                                                    bool weights_only) const {
  Coverage c;
  for (Parameter* p : store_.params()) {
    if (pieces.has("model/" + p->name)) continue;
    if (weights_only && is_lora_parameter(p->name))
      ++c.fresh_adapters;
    else
      c.absent.insert(p->name);
  }
  MT_INPUT_CHECK(c.absent.empty() || !recipe_.checkpoint.strict, path,
                 ": the checkpoint has no tensor for ", c.absent.size(),
                 " parameter(s) of this model: ", join(c.absent),
                 " (a checkpoint of a different model? checkpoint.strict: false loads the rest)");
  return c;
}

// Every piece this rank reads: the model weights (whole or ZeRO-3 segments), the MoE expert
// bias, and (not weights only) the masters and moments of its optimizer segments.
void Checkpointer::request_pieces(LoadPieces& pieces, const HostBuffers& host,
                                  const std::string& path, bool weights_only) const {
  auto loaded = [&](const Parameter& p) { return pieces.has("model/" + p.name); };
  if (store_.sharding().weights) {
    for (const auto* segs : {&store_.segments(), &store_.frozen_segments()})
      for (const optim::Segment& s : *segs)
        if (loaded(*s.param)) pieces.add(segment_piece(s, "model/", host.weights + s.weight_at));
  } else {
    for (Parameter* p : store_.params())
      if (loaded(*p)) pieces.add(param_piece(*p, "model/", host.weights + p->offset));
  }
  if (moe_ != nullptr)
    for (auto& [layer, bias] : moe_->all_expert_bias())
      if (ckpt::TensorPiece piece = expert_bias_piece(layer, bias); pieces.has(piece.name))
        pieces.add(std::move(piece));
  if (!weights_only) request_residuals(pieces);
  for (const optim::Segment& s : optimizer_->segments()) {
    if (!loaded(*s.param)) continue;
    if (store_.mixed_precision() || s.offloaded) {  // offloaded fp32 masters: a host copy
      const std::string prefix = pieces.has("master/" + s.param->name) ? "master/" : "model/";
      pieces.add(segment_piece(s, prefix, host.master_of(s)));
    }
    if (weights_only) continue;
    MT_INPUT_CHECK(pieces.has("optim/exp_avg/" + s.param->name), path, ": no optimizer state for '",
                   s.param->name, "' (set checkpoint.finetune: true to load the weights only)");
    pieces.add(segment_piece(s, "optim/exp_avg/", host.exp_avg_of(s)));
    if (float* sq = host.exp_avg_sq_of(s)) pieces.add(segment_piece(s, "optim/exp_avg_sq/", sq));
  }
}

// Tensors of the checkpoint no rank uses (e.g. a 2-layer checkpoint loaded into a 1-layer
// model): an error listing them, or with checkpoint.strict: false, named and skipped; then what
// a partial load left out, named.
// Compression error buffers (top-k residuals, 1-bit Adam's) saved by this layout and rank; where
// there are none (another layout, a run without compression) error feedback starts from zero, which
// rank 0 says.
void Checkpointer::request_residuals(LoadPieces& pieces) const {
  int64_t missing = 0;
  for (auto [name, residual] : grad_sync_->compression_residuals()) {
    ckpt::TensorPiece piece = residual_piece(residual_key(name), residual);
    if (pieces.has(piece.name, residual.shape())) {
      pieces.add(std::move(piece));
    } else {
      residual.zero_();
      ++missing;
    }
  }
  if (missing > 0 && log_ != nullptr)
    *log_ << "checkpoint: no gradient-compression error buffers of this layout and rank (another "
             "layout, or saved without parallel.grad_compression / onebit_adam): error feedback "
             "restarts from zero\n";
}

void Checkpointer::report_partial_load(const Coverage& coverage, const LoadPieces& pieces,
                                       const ckpt::CheckpointIndex& index) const {
  const std::vector<std::string> unused = unused_model_tensors(index, pieces.used(), *world_);
  MT_INPUT_CHECK(unused.empty() || !recipe_.checkpoint.strict, index.path, ": ", unused.size(),
                 " tensor(s) of the checkpoint are not part of this model: ", join(unused),
                 " (a checkpoint of a different model? checkpoint.strict: false skips them)");
  if (!log_) return;
  if (coverage.fresh_adapters > 0)
    *log_ << "LoRA: " << coverage.fresh_adapters
          << " adapter weights are not in the pretrained checkpoint; they start from their "
             "initialisation (B = 0: the base model's function)\n";
  for (const std::string& name : coverage.absent)
    *log_ << "checkpoint.strict: false: '" << name
          << "' is not in the checkpoint; it keeps its initial value\n";
  for (const std::string& name : unused)
    *log_ << "checkpoint.strict: false: checkpoint tensor '" << name << "' is not used\n";
}

// The run state of a full checkpoint: optimizer steps, the iteration, where the data continues
// (consumed samples, for another global batch size), the loss scaler; warnings when the seed or
// the data changed.
Checkpointer::Resume Checkpointer::resume_from(const nlohmann::json& meta,
                                               const std::string& path) {
  MT_INPUT_CHECK(meta.contains("iteration") && meta.contains("optimizer_steps"), path,
                 "/metadata.json: missing iteration or optimizer_steps");
  optimizer_->set_steps_taken(meta["optimizer_steps"].get<int64_t>());
  const int64_t iteration = meta["iteration"].get<int64_t>();
  Resume resume;
  resume.iteration = iteration;
  if (log_ && iteration >= recipe_.training.train_iters)
    *log_ << "nothing to train: the checkpoint is at iteration " << iteration
          << ", training.train_iters is " << recipe_.training.train_iters
          << " (raise it to train on)\n"
          << std::flush;
  const int64_t gbs = recipe_.training.global_batch_size;
  if (meta.contains("consumed_samples") && meta["consumed_samples"].is_number_integer()) {
    const int64_t consumed = meta["consumed_samples"].get<int64_t>();
    resume.sample_offset = consumed - iteration * gbs;
    if (resume.sample_offset != 0 && log_)
      *log_ << "resuming after " << consumed << " consumed samples (" << iteration
            << " iterations) with global_batch_size " << gbs << ": the data continues at sample "
            << consumed << "\n";
  }
  if (log_ && meta.contains("layout")) {
    const std::string change = describe_layout_change(
        meta["layout"],
        {tp_->size(), pp_->size(), dp_->size(), gbs, recipe_.training.micro_batch_size});
    if (!change.empty()) *log_ << change << "\n";
  }
  // The data order follows the seed and the blend: a change continues on other samples.
  if (log_ && meta.contains("data") && meta["data"].contains("seed") &&
      meta["data"]["seed"] != recipe_.training.seed)
    *log_ << "warning: the checkpoint was trained with seed " << meta["data"]["seed"]
          << ", this run uses " << recipe_.training.seed
          << ": data order and dropout masks differ from the saved run's\n";
  if (log_ && meta.contains("recipe") && meta["recipe"].contains("data") &&
      meta["recipe"]["data"].contains("train") &&
      meta["recipe"]["data"]["train"] != recipe_.to_json()["data"]["train"])
    *log_ << "warning: data.train differs from the checkpoint's ("
          << meta["recipe"]["data"]["train"].dump() << "): the data order changes\n";
  if (meta.contains("loss_scaler")) scaler_->load_state(meta["loss_scaler"]);
  return resume;
}

}  // namespace megatron::training
