#pragma once
// GPT (GPT-2/3 style): token + learned position embeddings, pre-LN transformer blocks, final
// norm, LM head tied to the token embedding (or untied), vocab-parallel cross-entropy.
// The same class serves LLaMA-style variants through TransformerSpec (RMSNorm, SwiGLU, RoPE).
#include <functional>
#include <memory>
#include <vector>

#include "kernels/common/vocab_slice.h"
#include "megatron/transformer/block.h"
#include "models/model.h"

namespace megatron::models {

struct GPTSpec {
  TransformerSpec transformer;
  int64_t vocab_size = 0;         // real tokens (the tokenizer's)
  int64_t padded_vocab_size = 0;  // multiple of make_vocab_size_divisible_by * tp
  int64_t max_positions = 0;      // learned position table rows (0 when rope)
  bool tie_embeddings = true;
  float embedding_dropout = 0.0f;
  // Token embeddings times this (Gemma: sqrt(hidden) in the activation dtype); 1: none.
  float embedding_scale = 1.0f;
  // > 0: logits soft-capped to cap * tanh(logits / cap) (Gemma 2's final_logit_softcapping).
  float final_logit_softcap = 0.0f;
  void validate(int64_t tp_size) const;
};

// Megatron's rule: round vocab up to a multiple of divisible_by * tp.
int64_t padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp_size);

using GPTStage = ModelStage;

class GPTModel final : public Model {
 public:
  struct Activations final : ModelActivations {
    Embedding::Ctx tok, pos;
    PositionIds positions;
    Tensor embedded, embedded_dropped;
    // Per layer; under full recompute each holds only the layer's output (a checkpoint).
    std::vector<TransformerBlock::Ctx> blocks;
    Norm::Ctx final_norm;
    Tensor final_out, final_full, d_final_full, logits, losses, lse, dlosses;
    Tensor logits_tanh;     // final_logit_softcap: tanh(logits / cap), for backward
    Tensor grad_a, grad_b;  // ping-pong residual-stream grads
    Linear::Ctx lm_head;
    const Tensor* last_hidden = nullptr;  // output of the last block (stage output)
  };

  // workspace: the recompute workspace shared with this rank's other model chunks (see
  // TransformerSpec::recompute in megatron/transformer/block.h); one of its own when null.
  // submodules: what each block's attention and MLP are (dense; moe::moe_submodules for MoE).
  GPTModel(const GPTSpec& spec, ParamStore& store, parallel::Communicator& tp,
           const GPTStage& stage = {}, std::shared_ptr<RecomputeWorkspace> workspace = nullptr,
           const BlockSubmodules& submodules = dense_submodules());

  std::unique_ptr<ModelActivations> make_activations() const override {
    return std::make_unique<Activations>();
  }
  // Model interface (models/model.h). forward's LossSums.lm is the summed cross-entropy over
  // labels != kIgnoreIndex; there is no aux loss.
  LossSums forward(ModelActivations& act, const MicroBatch& mb,
                   const Tensor* hidden_in = nullptr) const override;
  const Tensor& output(const ModelActivations& act) const override;
  void backward(ModelActivations& act, const MicroBatch& mb, const LossWeights& weights,
                const GradsReady& grads_ready = {}, const Tensor* d_hidden_out = nullptr,
                Tensor* d_hidden_in = nullptr) const override;
  const ModelStage& stage() const override { return stage_; }
  DType activation_dtype() const override { return spec_.transformer.activation_dtype; }
  Device device() const override { return device_; }
  Parameter* word_embeddings() const override {
    return tok_embed_ ? &tok_embed_->table() : nullptr;
  }
  const Tensor& token_losses(const ModelActivations& act) const override;

  const GPTSpec& spec() const { return spec_; }

 private:
  kernels::VocabSlice vocab_slice() const;
  bool sp() const { return spec_.transformer.sequence_parallel && tp_->size() > 1; }
  DType act_dtype() const { return spec_.transformer.activation_dtype; }
  ActivationSlice slice(const MicroBatch& mb, int64_t local_seq) const;
  void tied_head_backward(Activations& a, int64_t S, int64_t B, Tensor& d_final,
                          const MicroBatchInfo& info) const;

  GPTSpec spec_;
  Device device_;  // the store's: where the activations live
  GPTStage stage_;
  parallel::Communicator* tp_;
  std::unique_ptr<parallel::Communicator> replicated_;  // group of one for replicated tables
  std::unique_ptr<Embedding> tok_embed_, pos_embed_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Norm> final_norm_;
  std::unique_ptr<Linear> lm_head_;  // only when untied
};

}  // namespace megatron::models
