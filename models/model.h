#pragma once
// What every model gives the trainer and the pipeline runtime: one pipeline stage (or virtual
// chunk) of the network with an explicit forward/backward over per-micro-batch activations.
// GPT/LLaMA decoders (models/gpt) and the BERT encoder (models/bert) implement it, so data,
// tensor, pipeline parallelism, checkpoints and the optimizer are shared by all of them.
#include <cstdint>
#include <functional>
#include <memory>

#include "megatron/core/tensor.h"
#include "megatron/params/parameter.h"
#include "megatron/params/unit_hooks.h"
#include "megatron/transformer/context.h"

namespace megatron::models {

// Labels equal to this are not predicted (not counted in the loss).
constexpr int32_t kIgnoreIndex = -100;

// One micro-batch, sequence-major like the activations. "Empty" fields are default-constructed
// Tensors: test with present(), not numel() (a default Tensor is a 0-d scalar shape).
struct MicroBatch {
  Tensor tokens, labels;  // int32 [S, B]
  Tensor token_types;     // int32 [S, B] segment ids (BERT); empty otherwise
  Tensor padding_mask;    // uint8 [B, S], 1 = real token (BERT); empty: no padding
  Tensor nsp_labels;      // int32 [B] sentence-pair labels (BERT binary head); empty otherwise
  // Packed documents (causal decoders): int32 [S, B] positions restarting at each document and
  // int32 [B, S] document index of each token; empty: one document per sequence.
  Tensor position_ids, segment_ids;
  MicroBatchInfo info;
  // info with position_ids / segment_ids pointing at this batch's tensors (what layers see).
  MicroBatchInfo layer_info() const;
};

inline bool present(const Tensor& t) { return t.ndim() > 0; }

// Number of labels != kIgnoreIndex (the language-model loss terms of this micro-batch).
int64_t count_lm_targets(const MicroBatch& mb);
// Number of sentence-pair labels (0 without a binary head).
inline int64_t count_aux_targets(const MicroBatch& mb) {
  return present(mb.nsp_labels) ? mb.nsp_labels.numel() : 0;
}

// Device-agnostic helpers for the few per-element loops of the models. Index tensors that the
// host knows (positions) are made on the host and copied; reductions of per-token losses read a
// host copy (the tensor itself on the CPU, so the sums are the same).
// pos [S, B] int32 <- first + s.
void fill_positions(Tensor& pos, int64_t first);
// Position ids [S, B] = first + s on the compute device, kept between micro-batches: rebuilt
// (through a host copy on a device) only when the shape or the first position changes.
struct PositionIds {
  Tensor ids;
  int64_t first = -1;
  const Tensor& get(int64_t S, int64_t B, int64_t first_position, Device device);
};
// t <- v everywhere (ops::fill: no host round trip on a device).
void fill_value(Tensor& t, float v);
// Sum (in double, in index order) of losses[i] where labels[i] != kIgnoreIndex.
double sum_target_losses(const Tensor& losses, const Tensor& labels);
// Sum (in double, in index order) of every element of an fp32 tensor.
double sum_values(const Tensor& t);

// Which part of the model one instance holds: a pipeline stage (or virtual-stage chunk) owns
// layers [first_layer, first_layer + num_layers); the first also holds the embeddings, the
// last the final norm / heads and the loss. The default is the whole model.
struct ModelStage {
  int64_t first_layer = 0;
  int64_t num_layers = -1;   // -1: all layers
  bool pre_process = true;   // embeddings
  bool post_process = true;  // final norm, heads, loss
  // This stage with num_layers -1 made explicit; an error when its layers fall outside a
  // model of total_layers.
  ModelStage resolved(int64_t total_layers) const;
};

// Losses summed (not averaged) over one micro-batch: `lm` over its counted labels, `aux` (the
// BERT sentence-pair loss) over its samples. Zero unless this stage has post_process.
struct LossSums {
  double lm = 0, aux = 0;
  LossSums& operator+=(const LossSums& o) {
    lm += o.lm;
    aux += o.aux;
    return *this;
  }
};

// Backward seeds: d(objective)/d(lm sum) and d(objective)/d(aux sum). The trainer's objective is
// lm_sum / (lm targets in the global batch) + aux_sum / (aux targets in the global batch), times
// the loss scale, so any micro-batching and data-parallel split gives the same gradients.
struct LossWeights {
  float lm = 0, aux = 0;
};

// Per-micro-batch activation storage of one model; created by the model (make_activations) and
// reused across micro-batches of the same shape.
struct ModelActivations {
  virtual ~ModelActivations() = default;
};

// The parameter units of one stage (ParamStore::begin_unit): -1 where the stage lacks the part.
// The word embeddings are a unit of their own, so a tied copy on another pipeline stage is cut
// into the same shards.
struct StageUnits {
  int64_t word = -1;        // word embeddings (input table or tied output copy)
  int64_t embeddings = -1;  // the other embedding tables and norm
  int64_t head = -1;        // final norm, output layer, heads
  std::vector<int64_t> layers;
};

class Model {
 public:
  virtual ~Model() = default;

  // Fully sharded data parallelism: where forward and backward announce their units' use (null:
  // every weight and gradient resident). The hooks must outlive the model's use.
  void set_unit_hooks(UnitHooks* hooks) { unit_hooks_ = hooks; }

  virtual std::unique_ptr<ModelActivations> make_activations() const = 0;

  // Runs forward; returns the summed losses (non-zero only with post_process). hidden_in is the
  // previous stage's output ([S(/tp), B, D]) when this stage has no embeddings.
  virtual LossSums forward(ModelActivations& act, const MicroBatch& mb,
                           const Tensor* hidden_in = nullptr) const = 0;
  // This stage's output activation (when not post_process), valid after forward.
  virtual const Tensor& output(const ModelActivations& act) const = 0;

  // Backward of the last forward on `act`. d_hidden_out: gradient of this stage's output (when
  // not post_process). d_hidden_in: where the gradient of hidden_in is written (when not
  // pre_process). grads_ready (optional) is called as backward proceeds with a watermark W:
  // every gradient at a buffer offset below W is final (data parallelism starts reducing).
  using GradsReady = std::function<void(int64_t watermark)>;
  virtual void backward(ModelActivations& act, const MicroBatch& mb, const LossWeights& weights,
                        const GradsReady& grads_ready = {}, const Tensor* d_hidden_out = nullptr,
                        Tensor* d_hidden_in = nullptr) const = 0;

  virtual const ModelStage& stage() const = 0;
  // The dtype of the activations (and of a stage's input/output and their gradients).
  virtual DType activation_dtype() const = 0;
  // Where its parameters and activations live (its ParamStore's device).
  virtual Device device() const = 0;
  // The word-embedding table this stage holds (input embedding or a tied output layer), or null.
  // Pipeline parallelism sums its gradient over the embedding group (first + last stage).
  virtual Parameter* word_embeddings() const = 0;
  // Whether forward reports an aux (sentence-pair) loss.
  virtual bool has_aux_loss() const { return false; }
  // Per-token LM losses of the last forward ([S*B] fp32, 0 where ignored), for tests/eval.
  virtual const Tensor& token_losses(const ModelActivations& act) const = 0;

 protected:
  // Layer l (of this stage) starts or ends its unit's run of layers: a unit of several layers is
  // announced once, around all of them (forward in layer order, backward in reverse).
  bool first_layer_of_unit(size_t l) const {
    return l == 0 || units_.layers[l - 1] != units_.layers[l];
  }
  bool last_layer_of_unit(size_t l) const {
    return l + 1 == units_.layers.size() || units_.layers[l + 1] != units_.layers[l];
  }
  void layer_unit_begins(size_t l, bool backward) const {
    if (unit_hooks_ == nullptr) return;
    const int64_t u = units_.layers[l];
    if (backward && last_layer_of_unit(l)) unit_hooks_->before_backward(u);
    if (!backward && first_layer_of_unit(l)) unit_hooks_->before_forward(u);
  }
  void layer_unit_ends(size_t l, bool backward) const {
    if (unit_hooks_ == nullptr) return;
    const int64_t u = units_.layers[l];
    if (backward && first_layer_of_unit(l)) unit_hooks_->after_backward(u);
    if (!backward && last_layer_of_unit(l)) unit_hooks_->after_forward(u);
  }
  // The unit of layer `index` of this stage when units span `per_unit` layers: a new one every
  // per_unit layers.
  int64_t layer_unit(ParamStore& store, size_t index, int64_t per_unit) {
    if (index % static_cast<size_t>(per_unit) == 0 || units_.layers.empty())
      return store.begin_unit();
    return units_.layers.back();
  }

  UnitHooks* unit_hooks_ = nullptr;
  StageUnits units_;
};

}  // namespace megatron::models
