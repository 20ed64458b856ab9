#pragma once
// The trainer's checkpoints: which tensors a rank writes (each element exactly once across the
// world), how a rank finds its pieces in any saved layout, and the resume state.
//
// Saved tensors, all fp32 under their global parameter names:
//   model/<name>            the model (compute) weights
//   master/<name>           fp32 master weights (mixed precision only)
//   optim/exp_avg/<name>    Adam moments (as flat segments of this rank's shards)
//   optim/exp_avg_sq/<name>
// Metadata: the resolved recipe, iteration, consumed samples, optimizer step count and the
// loss scaler state. The data order, dropout masks and LR schedule are functions of
// (seed, iteration), so they resume exactly without further state.
#include <cstdint>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "megatron/checkpoint/async_save.h"
#include "megatron/checkpoint/save_lock.h"
#include "megatron/config/recipe.h"
#include "megatron/core/device_memory.h"
#include "megatron/optimizer/loss_scaler.h"
#include "megatron/optimizer/lr_schedule.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/params/parameter.h"
#include "megatron/training/gradient_sync.h"
#include "megatron/training/groups.h"
#include "megatron/transformer/moe/moe_spec.h"

namespace megatron::training {

class LoadPieces;  // checkpointer.cpp: the pieces one load reads

// What a checkpoint holds of a run (all owned by the trainer, which outlives the checkpointer).
struct TrainingState {
  ParamStore* store;
  optim::Optimizer* optimizer;
  const GradientSync* grad_sync;  // says which shards this rank holds and writes
  optim::LossScaler* scaler;
  const optim::LRSchedule* schedule;
  moe::MoeState* moe = nullptr;  // MoE: the expert bias is saved and loaded
};

class Checkpointer {
 public:
  // groups: world, tp, pp and dp must be set. vocab_size / padded_vocab: the model's real and
  // padded vocabulary (recorded, so a load tells vocabulary padding from another vocabulary).
  // log: where world rank 0 reports (null on the other ranks).
  Checkpointer(const config::Recipe& recipe, const TrainerGroups& groups,
               const TrainingState& state, int64_t vocab_size, int64_t padded_vocab,
               std::ostream* log);

  // Saves iteration `iteration` into checkpoint.save; samples consumed before iteration i are
  // sample_offset + i * global_batch_size. With checkpoint.async_save it returns once the
  // shards are copied to host memory (after waiting for a save still pending); the save is
  // committed by a later poll() or finish_saves(). Collective over the world.
  void save(int64_t iteration, int64_t sample_offset);
  // Collective, after every step: commits a pending asynchronous save once every rank's shard
  // is written (a no-op, without communication, when none is pending).
  void poll();
  // Collective: waits for and commits a pending asynchronous save (before the run ends).
  void finish_saves();
  // checkpoint.async_save: sizes the host snapshot and touches its pages in the background (so
  // the first save's copy does not wait for page faults). Before the first save.
  void prepare_saves();

  struct Resume {
    int64_t iteration = 0;      // continue after this one (0: fresh, or weights only)
    int64_t sample_offset = 0;  // the saved consumed_samples - iteration * global_batch_size
  };
  // Loads checkpoint.load, or (auto-resume after a requeue) the newest checkpoint in
  // checkpoint.save; a fresh run when there is none.
  // With checkpoint.pretrained and no such checkpoint: its weights only (a fresh run).
  Resume load();

 private:
  Resume load_from(const std::string& dir, bool weights_only);
  // load_from's steps (checkpointer.cpp): which parameters the checkpoint lacks, the pieces this
  // rank reads, the report of a partial load, the run state of the metadata.
  struct Coverage {
    std::set<std::string> absent;  // parameters without a tensor (checkpoint.strict: false)
    int64_t fresh_adapters = 0;    // LoRA adapters a base checkpoint cannot hold
  };
  struct HostBuffers;
  Coverage check_coverage(const LoadPieces& pieces, const std::string& path,
                          bool weights_only) const;
  void request_pieces(LoadPieces& pieces, const HostBuffers& host, const std::string& path,
                      bool weights_only) const;
  void report_partial_load(const Coverage& coverage, const LoadPieces& pieces,
                           const checkpoint::CheckpointIndex& index) const;
  // parallel.grad_compression topk: the checkpoint key of this rank's residual `name`, and the
  // residuals a load reads (zeroed where the checkpoint has none of this layout).
  std::string residual_key(const std::string& name) const;
  void request_residuals(LoadPieces& pieces) const;
  Resume resume_from(const nlohmann::json& meta, const std::string& path);
  // The recipe saved in the metadata (tokenizer paths made absolute).
  nlohmann::json recipe_for_metadata() const;
  // fp32 host views of the buffers a checkpoint reads and writes: the buffers themselves on
  // the CPU in fp32; otherwise staged fp32 host copies (16-bit model weights widened), which
  // write_back copies (and rounds) back.
  struct HostBuffers {
    float *weights = nullptr, *masters = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
    // Offload: the offloaded segments' masters and moments (host memory already).
    float *host_masters = nullptr, *host_exp_avg = nullptr, *host_exp_avg_sq = nullptr;
    float* master_of(const optim::Segment& s) const {
      return (s.offloaded ? host_masters : masters) + s.master_at;
    }
    float* exp_avg_of(const optim::Segment& s) const {
      return (s.offloaded ? host_exp_avg : exp_avg) + s.state_offset;
    }
    float* exp_avg_sq_of(const optim::Segment& s) const {
      float* base = s.offloaded ? host_exp_avg_sq : exp_avg_sq;
      return base == nullptr ? nullptr : base + s.state_offset;
    }
    std::vector<std::pair<Tensor*, Tensor>> staged;
  };
  HostBuffers host_buffers(bool weights_only);
  void write_back(const HostBuffers& host);
  std::string checkpoint_dir(const std::string& dir) const;

  const config::Recipe& recipe_;
  parallel::Communicator *world_, *tp_, *pp_, *dp_;
  ParamStore& store_;
  optim::Optimizer* optimizer_;
  const GradientSync* grad_sync_;
  moe::MoeState* moe_;
  parallel::Communicator* expert_dp_;
  bool experts_fold_tp_;  // whole experts under tp > 1: every tp rank writes its own
  optim::LossScaler* scaler_;
  const optim::LRSchedule& schedule_;
  int64_t vocab_size_, padded_vocab_;
  std::ostream* log_;         // null on ranks that do not report
  std::string resumed_from_;  // checkpoint directory loaded at start (never deleted)
  std::unique_ptr<checkpoint::SaveDirLock> save_lock_;  // checkpoint.save, on world rank 0
  // checkpoint.async_save: the save in flight and the time training spent on it so far.
  std::unique_ptr<checkpoint::AsyncSave> async_;
  // Asynchronous saves on a device: page-locked staging of the weights, masters and moments,
  // reused by every save (the previous one is written before the next overwrites it).
  std::vector<PinnedHostBuffer> pinned_staging_;
  double async_blocked_s_ = 0.0;
  void finish_async(bool wait, bool at_exit = false);
  // The pieces this rank writes (pointing into `host`, which it fills) and the metadata.
  struct HostBuffers;
  checkpoint::SaveRequest save_request(int64_t iteration, int64_t sample_offset, HostBuffers& host);
  nlohmann::json save_metadata(int64_t iteration, int64_t sample_offset) const;
};

}  // namespace megatron::training
