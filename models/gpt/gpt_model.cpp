#include "models/gpt/gpt_model.h"

#include <limits>

#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/kv_cache.h"
#include "megatron/transformer/vocab_parallel.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron::models {

int64_t padded_vocab(int64_t vocab, int64_t divisible_by, int64_t tp_size) {
  const int64_t multiple = std::max<int64_t>(divisible_by, 1) * tp_size;
  return (vocab + multiple - 1) / multiple * multiple;
}

void GPTSpec::validate(int64_t tp_size) const {
  transformer.validate(tp_size);
  MT_CHECK(vocab_size > 0 && padded_vocab_size >= vocab_size, "vocab size ", vocab_size,
           " / padded ", padded_vocab_size);
  MT_CHECK(padded_vocab_size % tp_size == 0, "padded vocab ", padded_vocab_size,
           " not divisible by tensor parallel size ", tp_size);
  MT_CHECK(transformer.rope || max_positions >= transformer.seq_length, "max positions ",
           max_positions, " < seq length ", transformer.seq_length);
}

GPTModel::GPTModel(const GPTSpec& spec, ParamStore& store, parallel::Communicator& tp,
                   const GPTStage& stage, std::shared_ptr<RecomputeWorkspace> workspace,
                   const BlockSubmodules& submodules)
    : spec_(spec),
      device_(store.device()),
      stage_(stage),
      tp_(&tp),
      replicated_(parallel::make_single_process_communicator()) {
  spec.validate(tp.size());
  const auto& t = spec.transformer;
  stage_ = stage_.resolved(t.num_layers);
  const bool sp = t.sequence_parallel && tp.size() > 1;
  // The word embeddings live on the first stage; with tied embeddings the last stage holds a
  // copy (same name, so the same initial values) whose gradient is summed with the first's.
  // (A tied head in the same store as the first stage's table, ZB-V's last virtual stage on
  // stage 0, shares it instead.)
  if (stage_.pre_process || (stage_.post_process && spec.tie_embeddings)) {
    const bool shared = !stage_.pre_process && store.find("embedding.word_embeddings.weight");
    if (!shared) units_.word = store.begin_unit();
    tok_embed_ = std::make_unique<Embedding>(store, "embedding.word_embeddings",
                                             spec.padded_vocab_size, t.hidden, tp, t.init_std, sp,
                                             /*share_existing=*/!stage_.pre_process);
    // The shared table's unit is gathered for the head too (sharded weights).
    if (shared) units_.word = tok_embed_->table().unit;
  }
  if (stage_.pre_process && !t.rope) {
    units_.embeddings = store.begin_unit();
    pos_embed_ =
        std::make_unique<Embedding>(store, "embedding.position_embeddings", spec.max_positions,
                                    t.hidden, *replicated_, t.init_std);
    // With sequence parallelism each rank looks up only its positions.
    pos_embed_->table().tp_partial_grad = sp;
  }
  if (t.recompute != Recompute::None && !workspace)
    workspace = std::make_shared<RecomputeWorkspace>();
  for (int64_t l = stage_.first_layer; l < stage_.first_layer + stage_.num_layers; ++l) {
    units_.layers.push_back(
        layer_unit(store, static_cast<size_t>(l - stage_.first_layer), t.unit_layers));
    blocks_.push_back(std::make_unique<TransformerBlock>(store, "layers." + std::to_string(l), l, t,
                                                         tp, workspace, submodules));
  }
  if (stage_.post_process) {
    units_.head = store.begin_unit();
    final_norm_ = std::make_unique<Norm>(store, "final_norm", t.hidden, t.norm, t.norm_eps, sp,
                                         t.norm_zero_centered_gamma);
    if (!spec.tie_embeddings)
      lm_head_ = std::make_unique<Linear>(store, "output_layer", t.hidden, spec.padded_vocab_size,
                                          false, TPMode::Column, tp, t.init_std, Shape{}, sp);
  }
}

kernels::VocabSlice GPTModel::vocab_slice() const {
  return megatron::vocab_slice(spec_.padded_vocab_size, spec_.vocab_size, *tp_);
}

ActivationSlice GPTModel::slice(const MicroBatch& mb, int64_t local_seq) const {
  return activation_slice(mb.info, local_seq, *tp_, sp());
}

namespace {

GPTModel::Activations& own(ModelActivations& act) {
  auto* a = dynamic_cast<GPTModel::Activations*>(&act);
  MT_CHECK(a != nullptr, "GPTModel given another model's activations");
  return *a;
}
const GPTModel::Activations& own(const ModelActivations& act) {
  return own(const_cast<ModelActivations&>(act));
}

}  // namespace

const Tensor& GPTModel::token_losses(const ModelActivations& act) const { return own(act).losses; }

const Tensor& GPTModel::output(const ModelActivations& act) const {
  const Activations& a = own(act);
  MT_CHECK(a.last_hidden != nullptr, "stage output requested before forward");
  return *a.last_hidden;
}

LossSums GPTModel::forward(ModelActivations& act, const MicroBatch& mb,
                           const Tensor* hidden_in) const {
  Activations& a = own(act);
  const auto& t = spec_.transformer;
  MT_CHECK(mb.tokens.ndim() == 2 && mb.labels.shape() == mb.tokens.shape(),
           "micro-batch tokens/labels must both be [S, B], got ", mb.tokens.shape().str(), " and ",
           mb.labels.shape().str());
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = t.hidden, N = S * B;
  MT_CHECK(!present(mb.position_ids) ||
               (mb.position_ids.shape() == Shape({S, B}) && mb.position_ids.dtype() == DType::I32),
           "micro-batch position_ids must be int32 [S, B] = [", S, ", ", B, "], got ",
           mb.position_ids.shape().str());
  // Under context parallelism the documents of the whole sequence (attention reads every key's).
  const int64_t S_all = mb.info.cp.active() ? mb.info.cp.total : S;
  MT_CHECK(!present(mb.segment_ids) || (mb.segment_ids.shape() == Shape({B, S_all}) &&
                                        mb.segment_ids.dtype() == DType::I32),
           "micro-batch segment_ids must be int32 [B, S] = [", B, ", ", S_all, "], got ",
           mb.segment_ids.shape().str());
  // Incremental decoding continues sequences of `past` cached positions.
  const int64_t past = mb.info.kv_cache != nullptr ? mb.info.kv_cache->length : 0;
  MT_CHECK(past + S <= t.seq_length, "micro-batch sequence ", S, " (after ", past,
           " cached positions) longer than seq_length ", t.seq_length);
  // Sl rows of [S, B, D] activations live here: all of them, or a sequence slice.
  MT_CHECK(!sp() || S % tp_->size() == 0, "sequence ", S, " not divisible by tensor parallel size ",
           tp_->size());
  const int64_t Sl = sp() ? S / tp_->size() : S;
  const ActivationSlice where = slice(mb, Sl);
  a.blocks.resize(blocks_.size());

  const Tensor* x = hidden_in;
  if (stage_.pre_process) {
    UnitUse use(unit_hooks_, {units_.word, units_.embeddings}, false);
    Tensor& x0 = ensure(a.embedded, {Sl, B, D}, act_dtype(), device_);
    tok_embed_->forward(a.tok, mb.tokens, x0);
    if (spec_.embedding_scale != 1.0f) ops::scale_inplace(x0, spec_.embedding_scale);
    if (pos_embed_) {
      Tensor packed_pos;  // this rank's rows of the per-document positions
      if (present(mb.position_ids))
        packed_pos = mb.position_ids.slice(where.seq_offset, where.seq_offset + Sl);
      const Tensor& pos = present(mb.position_ids)
                              ? packed_pos
                              : a.positions.get(Sl, B, where.seq_offset + past, device_);
      Tensor& pe = ensure(a.grad_a, {Sl, B, D}, act_dtype(), device_);  // scratch until backward
      pos_embed_->forward(a.pos, pos, pe);
      ops::add_inplace(x0, pe);
    }
    x = &x0;
    if (mb.info.training && spec_.embedding_dropout > 0.0f) {
      dropout_sbd_forward(x0, ensure(a.embedded_dropped, {Sl, B, D}, act_dtype(), device_),
                          spec_.embedding_dropout,
                          DropoutSite{t.seed, mb.info.iteration, t.num_layers, 7}, where);
      x = &a.embedded_dropped;
    }
    use.end();
  }
  MT_CHECK(x != nullptr && x->numel() == Sl * B * D, "stage input must be [", Sl, ", ", B, ", ", D,
           "]");
  const MicroBatchInfo info = mb.layer_info();
  for (size_t l = 0; l < blocks_.size(); ++l) {
    layer_unit_begins(l, false);
    x = &blocks_[l]->forward(a.blocks[l], *x, info);
    layer_unit_ends(l, false);
  }
  a.last_hidden = x;
  if (!stage_.post_process) return {};
  UnitUse use(unit_hooks_, {units_.head, lm_head_ ? -1 : units_.word}, false);

  final_norm_->forward(a.final_norm, *x, ensure(a.final_out, {Sl, B, D}, act_dtype(), device_));
  const kernels::VocabSlice vs = vocab_slice();
  Tensor& logits = ensure(a.logits, {N, vs.V_local}, act_dtype(), device_);
  if (lm_head_) {
    lm_head_->forward(a.lm_head, a.final_out, logits);
  } else {
    const Tensor* h = &a.final_out;
    if (sp()) {  // the vocab-parallel head needs every position
      tensor_parallel::gather_from_sequence_forward(
          *tp_, a.final_out, ensure(a.final_full, {S, B, D}, act_dtype(), device_));
      h = &a.final_full;
    }
    ops::linear_forward(*h, tok_embed_->table().weight, nullptr, logits);
  }
  if (spec_.final_logit_softcap > 0.0f) {  // logits <- cap tanh(logits / cap)
    Tensor& t = ensure(a.logits_tanh, logits.shape(), act_dtype(), device_);
    ops::scale_inplace(logits, 1.0f / spec_.final_logit_softcap);
    ops::tanh_forward(logits, t);
    logits.copy_from(t);
    ops::scale_inplace(logits, spec_.final_logit_softcap);
  }
  ensure(a.losses, {N}, DType::F32, device_);
  ensure(a.lse, {N}, DType::F32, device_);
  vocab_parallel_cross_entropy(logits, mb.labels, vs, kIgnoreIndex, *tp_, a.losses, a.lse);
  use.end();
  LossSums total;
  total.lm = sum_target_losses(a.losses, mb.labels);
  return total;
}

// The output layer tied to the word embeddings: d_final now, the table's gradient through
// run_weight_grads (now, or at the schedule's W).
void GPTModel::tied_head_backward(Activations& a, int64_t S, int64_t B, Tensor& d_final,
                                  const MicroBatchInfo& info) const {
  Parameter& table = tok_embed_->table();
  const Tensor& x = sp() ? a.final_full : a.final_out;
  if (sp()) {
    // Each rank's vocab slice gives a partial gradient for every position: sum and split.
    Tensor& full = ensure(a.d_final_full, {S, B, spec_.transformer.hidden}, act_dtype(), device_);
    ops::linear_backward(x, table.weight, a.logits, &full, nullptr, nullptr);
    tensor_parallel::gather_from_sequence_backward(*tp_, full, d_final);
  } else {
    ops::linear_backward(x, table.weight, a.logits, &d_final, nullptr, nullptr);
    tensor_parallel::copy_to_region_backward(*tp_, d_final);
  }
  if (!table.grad_or_null()) return;
  // Both are this micro-batch's activation buffers, kept until its W: no copies (the logits'
  // gradient is the largest tensor of the step).
  run_weight_grads(&info, {x, a.logits},
                   [&table](const std::vector<Tensor>& in) {
                     ops::linear_weight_grad(in[0], table.weight, in[1], table.grad_or_null(),
                                             nullptr);
                   },
                   {WeightGradInputs::Stable, WeightGradInputs::Stable});
}

void GPTModel::backward(ModelActivations& act, const MicroBatch& mb, const LossWeights& weights,
                        const GradsReady& grads_ready, const Tensor* d_hidden_out,
                        Tensor* d_hidden_in) const {
  Activations& a = own(act);
  const auto& t = spec_.transformer;
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = t.hidden, N = S * B;
  const int64_t Sl = sp() ? S / tp_->size() : S;
  const ActivationSlice where = slice(mb, Sl);
  auto report = [&](const std::vector<Parameter*>& params) {
    if (!grads_ready) return;
    int64_t w = 0;
    for (const Parameter* p : params)
      if (!p->frozen) w = std::max(w, p->offset + p->local_shape.numel());
    grads_ready(w);
  };

  // Buffer layout is reverse registration order: output layer / final norm, blocks L-1..0,
  // then the embeddings (which the tied LM head also feeds), so watermarks only grow.
  Tensor* grad = &ensure(a.grad_a, {Sl, B, D}, act_dtype(), device_);
  Tensor* other = &ensure(a.grad_b, {Sl, B, D}, act_dtype(), device_);
  const MicroBatchInfo info = mb.layer_info();
  if (stage_.post_process) {
    UnitUse use(unit_hooks_, {units_.head, lm_head_ ? -1 : units_.word}, true);
    const kernels::VocabSlice vs = vocab_slice();
    Tensor& dl = ensure(a.dlosses, {N}, DType::F32, device_);
    fill_value(dl, weights.lm);
    // d(logits) overwrites the logits buffer.
    ops::cross_entropy_backward(a.logits, mb.labels, vs, kIgnoreIndex, a.lse, dl, a.logits);
    if (spec_.final_logit_softcap > 0.0f)  // through the cap: times 1 - tanh^2
      ops::tanh_backward(a.logits_tanh, a.logits, a.logits);
    Tensor& d_final = *other;
    if (lm_head_) {
      lm_head_->backward(a.lm_head, a.logits, &d_final, &info);
    } else {
      tied_head_backward(a, S, B, d_final, info);
    }
    final_norm_->backward(a.final_norm, d_final, *grad);
    use.end();
    std::vector<Parameter*> tail;
    final_norm_->collect_params(tail);
    if (lm_head_) lm_head_->collect_params(tail);
    report(tail);
  } else {
    MT_CHECK(d_hidden_out != nullptr && d_hidden_out->numel() == Sl * B * D,
             "stage backward needs the gradient of its output [", Sl, ", ", B, ", ", D, "]");
    grad->copy_from(*d_hidden_out);
  }
  for (size_t l = blocks_.size(); l-- > 0;) {
    layer_unit_begins(l, true);
    blocks_[l]->backward(a.blocks[l], *grad, *other, info);
    layer_unit_ends(l, true);
    std::swap(grad, other);
    if (grads_ready) grads_ready(blocks_[l]->grad_watermark());
  }
  if (!stage_.pre_process) {
    MT_CHECK(d_hidden_in != nullptr, "stage backward needs a buffer for its input gradient");
    d_hidden_in->copy_from(*grad);
    if (grads_ready) grads_ready(std::numeric_limits<int64_t>::max());
    return;
  }
  if (mb.info.training && spec_.embedding_dropout > 0.0f) {
    dropout_sbd_backward(*grad, *other, spec_.embedding_dropout,
                         DropoutSite{t.seed, mb.info.iteration, t.num_layers, 7}, where);
    std::swap(grad, other);
  }
  UnitUse use(unit_hooks_, {units_.word, units_.embeddings}, true);
  if (pos_embed_) pos_embed_->backward(a.pos, *grad, &info);
  if (spec_.embedding_scale != 1.0f) ops::scale_inplace(*grad, spec_.embedding_scale);
  tok_embed_->backward(a.tok, *grad, &info);
  use.end();
  if (grads_ready) grads_ready(std::numeric_limits<int64_t>::max());
}

}  // namespace megatron::models
