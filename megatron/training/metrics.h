#pragma once
// Per-step and evaluation metrics, and where they go: the console (world rank 0), the JSONL log
// (logging.jsonl; its first line is the run's "start" event with the compute peak) and
// TensorBoard (logging.tensorboard_dir, Megatron's tag names).
#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/compute_peak.h"
#include "megatron/training/step_split.h"
#include "megatron/training/tensorboard.h"

namespace megatron::training {

struct StepMetrics {
  int64_t iteration = 0;
  // loss = lm_loss + aux_loss: the LM cross-entropy averaged over the global batch's predicted
  // tokens, plus (BERT) the sentence-pair loss averaged over its samples.
  double lm_loss = 0, aux_loss = 0;
  bool has_aux = false;
  double loss = 0, lr = 0, grad_norm = 0, seconds = 0, tokens_per_s = 0, tflops = 0, mfu = 0;
  double of_gemm = 0;  // achieved FLOP/s over the measured GEMM rate (CPU), beside MFU
  double loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update this step
  // training.rerun_skip_batch: a fault that its re-run repeated; no update this step.
  bool rerun_skipped = false;
  // The global batch had no predicted token (every label masked): a zero-gradient step.
  bool no_targets = false;
  // Payload bytes this rank handed to data-parallel collectives (reductions and weight gathers).
  int64_t dp_comm_bytes = 0;
  // Mixture of experts (training/moe_step.h): the router losses added to the objective (summed
  // over the MoE layers, averaged over the global batch's micro-batches; not part of `loss`),
  // the worst layer's load imbalance (max tokens per expert / mean) and the fraction of
  // (token, expert) pairs dropped by capacity.
  bool has_moe = false;
  double moe_aux_loss = 0, moe_z_loss = 0, moe_load_imbalance = 0, moe_dropped_fraction = 0;
  // Share of the step (this rank) spent moving tokens to and from the experts: dispatch and
  // combine (gathers, all-to-alls, permutations, tp reductions, gating), forward and backward.
  double moe_dispatch_share = 0;
  // Per layer (index = layer; 0 for dense layers): max tokens per expert / mean over the step.
  std::vector<double> moe_layer_imbalance;
  // How near the step's routing came to a tie (moe::Routing::min_margin over every rank, layer
  // and micro-batch; +inf when no choice left a candidate out): runs whose router inputs differ
  // by round-off may route differently only where this is within that round-off.
  double moe_min_routing_margin = 0;
  // This rank's step split (step_split.h): data, compute, exposed communication, pipeline,
  // optimizer.
  StepSplit split;
};

struct EvalMetrics {
  int64_t iteration = 0;
  double loss = 0, perplexity = 0;  // loss and perplexity of the LM part
  double aux_loss = 0;              // BERT sentence-pair loss (when has_aux)
  bool has_aux = false;
};

class MetricsSink {
 public:
  // Only the logger (world rank 0) writes anything; `console` is its human-readable stream.
  // Opens logging.jsonl (appending) and writes the start event, and the TensorBoard writer.
  MetricsSink(const config::Recipe& recipe, bool is_logger, std::ostream& console,
              const ComputePeak& peak, Device device, int ranks);
  ~MetricsSink();

  // The console stream on the logger, null elsewhere (for free-form lines).
  std::ostream* console() const { return is_logger_ ? console_ : nullptr; }
  // A step: to the console when to_console, always to JSONL and TensorBoard.
  void step(const StepMetrics& m, bool to_console);
  void eval(const EvalMetrics& e);
  // A straggler report (logging.straggler_interval): console line, JSONL event, TensorBoard.
  void stragglers(const StragglerReport& r);

 private:
  int64_t train_iters_;
  bool is_logger_;
  std::ostream* console_;
  Device device_;
  std::ofstream jsonl_;
  std::string jsonl_path_;
  void check_jsonl();
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

// Every rank's peak tensor memory on `device` and peak process RSS, gathered over `world`
// (collective) and written by rank 0 as one line: what the sharding strategies change per rank.
void report_rank_memory(parallel::Communicator& world, Device device, std::ostream& out);

}  // namespace megatron::training
