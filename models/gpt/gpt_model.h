#pragma once
// GPT (GPT-2/3 style): token + learned position embeddings, pre-LN transformer blocks, final
// norm, LM head tied to the token embedding (or untied), vocab-parallel cross-entropy.
// The same class serves LLaMA-style variants through TransformerSpec (RMSNorm, SwiGLU, RoPE).
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "megatron/transformer/block.h"

namespace megatron::models {

struct GPTSpec {
  TransformerSpec transformer;
  int64_t vocab_size = 0;         // real tokens (the tokenizer's)
  int64_t padded_vocab_size = 0;  // multiple of make_vocab_size_divisible_by * tp
  int64_t max_positions = 0;      // learned position table rows (0 when rope)
  bool tie_embeddings = true;
  float embedding_dropout = 0.0f;
  void validate(int64_t tp_size) const;
};

// Megatron's rule: round vocab up to a multiple of divisible_by * tp.
int64_t padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp_size);

// Which part of the model one instance holds: a pipeline stage (or virtual-stage chunk) owns
// layers [first_layer, first_layer + num_layers); the first also holds the embeddings, the
// last the final norm, LM head and loss. The default is the whole model.
struct GPTStage {
  int64_t first_layer = 0;
  int64_t num_layers = -1;   // -1: all layers
  bool pre_process = true;   // embeddings
  bool post_process = true;  // final norm, LM head, loss
};

// One micro-batch: tokens and labels are [S, B] int32 (sequence-major); labels equal to
// kIgnoreIndex are excluded from the loss.
struct MicroBatch {
  Tensor tokens, labels;
  MicroBatchInfo info;
};
constexpr int32_t kIgnoreIndex = -100;

class GPTModel {
 public:
  struct Activations {
    Embedding::Ctx tok, pos;
    Tensor positions, embedded, embedded_dropped;
    std::vector<TransformerBlock::Ctx> blocks;
    Norm::Ctx final_norm;
    Tensor final_out, final_full, d_final_full, logits, losses, lse, dlosses;
    Tensor grad_a, grad_b;  // ping-pong residual-stream grads
    Linear::Ctx lm_head;
    const Tensor* last_hidden = nullptr;  // output of the last block (stage output)
  };

  GPTModel(const GPTSpec& spec, ParamStore& store, parallel::Communicator& tp,
           const GPTStage& stage = {});

  // Runs forward and returns the summed loss over the micro-batch's counted tokens (0 unless
  // post_process). hidden_in is the previous stage's output ([S(/tp), B, D]) when this
  // stage has no embeddings. Backward must follow with the same activations.
  double forward(Activations& act, const MicroBatch& mb, const Tensor* hidden_in = nullptr) const;
  // This stage's output activation (when not post_process).
  const Tensor& output(const Activations& act) const;
  // loss_scale multiplies d(sum loss): 1 / (valid tokens in the global batch) gives the mean.
  // d_hidden_out: gradient of this stage's output (when not post_process). d_hidden_in: where
  // the gradient of hidden_in is written (when not pre_process).
  // grads_ready (optional) is called as backward proceeds with a watermark W: every gradient
  // at a buffer offset below W is final (data parallelism starts reducing those buckets).
  using GradsReady = std::function<void(int64_t watermark)>;
  void backward(Activations& act, const MicroBatch& mb, float loss_scale,
                const GradsReady& grads_ready = {}, const Tensor* d_hidden_out = nullptr,
                Tensor* d_hidden_in = nullptr) const;

  const GPTStage& stage() const { return stage_; }
  // The word-embedding table this stage holds (embedding or tied LM head), or null.
  Parameter* word_embeddings() const { return tok_embed_ ? &tok_embed_->table() : nullptr; }

  const GPTSpec& spec() const { return spec_; }
  // Per-token loss of the last forward (for evaluation and tests).
  static const Tensor& token_losses(const Activations& act) { return act.losses; }

 private:
  kernels::cpu::VocabSlice vocab_slice() const;
  bool sp() const { return spec_.transformer.sequence_parallel && tp_->size() > 1; }
  ActivationSlice slice(const MicroBatch& mb, int64_t local_seq) const;

  GPTSpec spec_;
  GPTStage stage_;
  parallel::Communicator* tp_;
  std::unique_ptr<parallel::Communicator> replicated_;  // group of one for replicated tables
  std::unique_ptr<Embedding> tok_embed_, pos_embed_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<Linear> lm_head_;  // only when untied
};

}  // namespace megatron::models
