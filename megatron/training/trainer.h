#pragma once
// The training loop: micro-batches with gradient accumulation, gradient clipping by the global
// norm, AdamW with the LR schedule, periodic validation, and per-step metrics (loss, lr, grad
// norm, tokens/s, TFLOP/s and MFU by Megatron's FLOPs formula) logged to stdout, JSONL
// and TensorBoard (logging.tensorboard_dir, Megatron's tag names).
// training.recompute (none|selective|full) selects activation recomputation in the transformer
// blocks (megatron/transformer/block.h); every model chunk of a rank shares one workspace.
#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <utility>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/optimizer/loss_scaler.h"
#include "megatron/optimizer/lr_schedule.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/planning/flops.h"
#include "megatron/training/batch_source.h"
#include "megatron/training/compute_peak.h"
#include "megatron/training/pipeline_runtime.h"
#include "megatron/training/tensorboard.h"
#include "models/gpt/gpt_model.h"

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
};

struct EvalMetrics {
  int64_t iteration = 0;
  double loss = 0, perplexity = 0;  // loss and perplexity of the LM part
  double aux_loss = 0;              // BERT sentence-pair loss (when has_aux)
  bool has_aux = false;
};

struct TrainSummary {
  std::vector<StepMetrics> steps;
  std::vector<EvalMetrics> evals;
  int64_t start_iteration = 0;  // resumed from this checkpoint iteration (0: fresh)
  int64_t last_iteration = 0;
  bool stopped_early = false;  // signal or training.exit_duration_minutes
};

// Builds the transformer of a recipe (any arch) and the GPT/LLaMA spec for a tokenizer
// vocabulary and tensor-parallel size.
TransformerSpec transformer_spec_from_recipe(const config::Recipe& recipe, int64_t tp_size);
// training.precision -> the model dtype (fp32, bf16 or fp16) of weights and activations.
DType model_dtype_of(const config::TrainingConfig& training);
models::GPTSpec gpt_spec_from_recipe(const config::Recipe& recipe, int64_t tokenizer_vocab,
                                     int64_t tp_size);
planning::FlopsModel flops_model_from_spec(const TransformerSpec& t, int64_t padded_vocab);
planning::FlopsModel flops_model_from_spec(const models::GPTSpec& spec);

// The process groups the trainer uses (from the mesh; all of size one for a single process).
struct TrainerGroups {
  parallel::Communicator* world;
  parallel::Communicator* tp;
  parallel::Communicator* dp;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* embedding = nullptr;  // first + last pipeline stage
  parallel::Communicator* model = nullptr;      // tp x pp (gradient norm)
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
  const optim::LossScaler& loss_scaler() const { return *scaler_; }
  const models::Model& model() const { return *chunks_.front(); }
  double flops_per_step() const { return flops_per_step_; }
  double peak_flops() const { return peak_.peak_flops; }
  const ComputePeak& compute_peak() const { return peak_; }
  Device device() const { return device_; }

 private:
  void log_step(const StepMetrics& m, bool to_console);
  void reduce_sequence_parallel_grads();
  std::string checkpoint_dir(const std::string& dir) const;
  // Checkpoints read and write host memory: pointers to the fp32 buffers (values, masters,
  // moments) on the CPU, or to host copies of them (written back by write_back) on a device.
  // fp32 host views of the buffers a checkpoint reads and writes: the buffers themselves on
  // the CPU in fp32; otherwise staged fp32 host copies (16-bit model weights widened), which
  // write_back copies (and rounds) back.
  struct HostBuffers {
    float *weights = nullptr, *masters = nullptr, *exp_avg = nullptr, *exp_avg_sq = nullptr;
    std::vector<std::pair<Tensor*, Tensor>> staged;
  };
  HostBuffers host_buffers(bool weights_only);
  void write_back(const HostBuffers& host);
  bool should_stop(double elapsed_minutes);
  bool fp16_gradient_overflow();
  // Builds this rank's chunks (virtual pipeline stages); returns the FLOPs model.
  planning::FlopsModel build_model(int64_t tokenizer_vocab);
  // The LM/aux target counts of the global batch made of these (this rank's) micro-batches.
  std::pair<double, double> global_target_counts(const std::vector<models::MicroBatch>& batches);
  void reduce_tied_embedding_grads();
  void fill(int64_t first_sample, const BatchSource& source, int64_t iteration, int64_t position,
            bool training, models::MicroBatch& mb) const;
  void log_eval(const EvalMetrics& m);
  // The micro-batch with its tensors on the training device (the same tensors on the CPU).
  models::MicroBatch on_device(const models::MicroBatch& mb) const;
  // Sums this rank's losses over the pipeline (where the last stage has them) and dp.
  models::LossSums reduce_losses(const models::LossSums& local);

  config::Recipe recipe_;
  std::shared_ptr<const BatchSource> train_, valid_;
  std::unique_ptr<parallel::Communicator> single_;  // groups of one when none are given
  parallel::Communicator* world_;
  parallel::Communicator* tp_;
  parallel::Communicator* dp_;
  parallel::Communicator* pp_;
  parallel::Communicator* embedding_;
  parallel::Communicator* model_group_;
  std::ostream* log_;
  bool is_logger_ = true;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // logging.tensorboard_dir (rank 0)
  ParamStore store_;
  std::vector<std::unique_ptr<models::Model>> chunks_;  // this rank's virtual stages
  std::unique_ptr<PipelineRuntime> pipeline_;
  std::unique_ptr<pipeline::TimelineRecorder> timeline_;
  std::vector<pipeline::Action> schedule_actions_;
  std::unique_ptr<optim::DataParallelGrads> grad_sync_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  optim::LRSchedule schedule_;
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<models::ModelActivations> act_;
  std::vector<models::MicroBatch> batches_;         // this step's micro-batches (host)
  std::vector<models::MicroBatch> device_batches_;  // the same on the training device
  Device device_ = Device::CPU;
  Tensor sp_grad_scratch_;
  std::string resumed_from_;  // checkpoint directory loaded at start (never deleted)
  int64_t dp_size_ = 1, dp_rank_ = 0, num_micro_ = 1;
  double flops_per_step_ = 0;
  // The real vocabulary and its padded size (all tp ranks together): recorded with every
  // checkpoint, so a load can tell vocabulary padding from a different vocabulary.
  int64_t vocab_size_ = 0, padded_vocab_ = 0;
  // Samples consumed before iteration i = sample_offset_ + i * global_batch_size: 0 unless a run
  // resumed with another global batch size (then the checkpoint's consumed_samples rules, as in
  // Megatron: no sample is skipped or repeated).
  int64_t sample_offset_ = 0;
  ComputePeak peak_;
};

}  // namespace megatron::training
