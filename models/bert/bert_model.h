#pragma once
// BERT (Devlin et al.): word + position + token-type embeddings summed, LayerNorm, dropout;
// post-LN bidirectional transformer blocks attending only to real (unpadded) tokens; a
// masked-LM head (dense + GELU + LayerNorm "transform", then a decoder tied to the word
// embeddings plus an output bias, vocab-parallel cross-entropy) and the binary sentence-pair
// (NSP) head on the [CLS] position (pooler dense + tanh, then a 2-way classifier).
//
// Parameter names: embedding.{word,position,tokentype}_embeddings.weight, embedding.norm.*,
// layers.<l>.* (TransformerBlock, post-LN), lm_head.dense.*, lm_head.norm.*, lm_head.bias
// (vocab-parallel like the table), pooler.dense.*, binary_head.*.
#include <memory>
#include <vector>

#include "kernels/common/vocab_slice.h"
#include "megatron/transformer/block.h"
#include "models/model.h"

namespace megatron::models {

struct BertSpec {
  TransformerSpec transformer;    // post_norm = true and causal = false (validate checks)
  int64_t vocab_size = 0;         // real tokens (the tokenizer's)
  int64_t padded_vocab_size = 0;  // divisible by tp (extra rows are never predicted)
  int64_t max_positions = 0;      // learned position table rows
  int64_t num_token_types = 2;    // 0: no token-type embedding
  bool binary_head = true;        // the sentence-pair (NSP) head and aux loss
  float embedding_dropout = 0.0f;
  void validate(int64_t tp_size) const;
};

// A BertSpec from plain sizes with BERT's fixed choices (post-LN, bidirectional, LayerNorm,
// GELU, biases, learned positions); eps 1e-12 as in the original.
BertSpec make_bert_spec(int64_t num_layers, int64_t hidden, int64_t heads, int64_t ffn,
                        int64_t seq_length, int64_t max_positions, int64_t vocab_size,
                        int64_t padded_vocab_size, bool binary_head = true,
                        float hidden_dropout = 0.1f, float attention_dropout = 0.1f);

// Per-micro-batch activations of a BertModel (what its forward keeps for backward).
struct BertActivations final : ModelActivations {
  // embeddings
  Embedding::Ctx word, pos, type;
  PositionIds positions;
  Tensor types, embedded, scratch, emb_norm_out, embedded_dropped;
  Norm::Ctx emb_norm;
  // blocks (under full recompute each holds only the layer's output, a checkpoint)
  std::vector<TransformerBlock::Ctx> blocks;
  const Tensor* last_hidden = nullptr;  // encoder output (stage output)
  Tensor grad_a, grad_b;                // ping-pong residual-stream gradients
  // masked-LM head
  Linear::Ctx transform;
  Norm::Ctx head_norm;
  Tensor transform_out, gelu_out, head_out, head_full, logits, losses, lse, dlosses;
  Tensor d_head, d_head_full, d_gelu;
  // sentence-pair head (on the [CLS] row of every sample, replicated over tp)
  Linear::Ctx pooler, binary;
  Tensor cls, pooler_out, pooled, nsp_logits, nsp_losses, nsp_lse, d_nsp, d_pooled, d_cls;
};

class BertModel final : public Model {
 public:
  // workspace: the recompute workspace shared with this rank's other model chunks (see
  // TransformerSpec::recompute in megatron/transformer/block.h); one of its own when null.
  BertModel(const BertSpec& spec, ParamStore& store, parallel::Communicator& tp,
            const ModelStage& stage = {}, std::shared_ptr<RecomputeWorkspace> workspace = nullptr);

  std::unique_ptr<ModelActivations> make_activations() const override;
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
    return word_embed_ ? &word_embed_->table() : nullptr;
  }
  bool has_aux_loss() const override { return spec_.binary_head; }
  const Tensor& token_losses(const ModelActivations& act) const override;

  const BertSpec& spec() const { return spec_; }

 private:
  bool sp() const { return spec_.transformer.sequence_parallel && tp_->size() > 1; }
  DType act_dtype() const { return spec_.transformer.activation_dtype; }
  ActivationSlice slice(const MicroBatch& mb, int64_t local_seq) const;
  DropoutSite embedding_dropout_site(const MicroBatch& mb) const;
  void check_batch(const MicroBatch& mb) const;
  void embed(BertActivations& a, const MicroBatch& mb, int64_t Sl) const;
  void embed_backward(BertActivations& a, const MicroBatch& mb, Tensor& grad, Tensor& other) const;
  double lm_head_forward(BertActivations& a, const MicroBatch& mb, const Tensor& h) const;
  void lm_head_backward(BertActivations& a, const MicroBatch& mb, float weight,
                        Tensor& d_hidden) const;
  double binary_head_forward(BertActivations& a, const MicroBatch& mb, const Tensor& h) const;
  void binary_head_backward(BertActivations& a, const MicroBatch& mb, float weight,
                            Tensor& d_hidden) const;

  BertSpec spec_;
  Device device_;  // the store's: where the activations live
  ModelStage stage_;
  parallel::Communicator* tp_;
  std::unique_ptr<parallel::Communicator> replicated_;  // group of one for replicated tables
  std::unique_ptr<Embedding> word_embed_, pos_embed_, type_embed_;
  std::unique_ptr<Norm> emb_norm_;
  std::vector<std::unique_ptr<TransformerBlock>> blocks_;
  std::unique_ptr<Linear> transform_;
  std::unique_ptr<Norm> head_norm_;
  Parameter* output_bias_ = nullptr;  // [padded_vocab], split over tp like the table
  std::unique_ptr<Linear> pooler_, binary_;
};

}  // namespace megatron::models
