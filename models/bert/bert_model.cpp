#include "models/bert/bert_model.h"

#include <cmath>
#include <limits>

#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/vocab_parallel.h"

namespace megatron::models {

namespace {

// A MicroBatch field that was not given is a default Tensor (0-d, not 0 elements).
bool given(const Tensor& t) { return t.ndim() > 0; }

void fill(Tensor& t, float v) { fill_value(t, v); }

int64_t params_end(const std::vector<Parameter*>& params) {
  int64_t end = 0;
  for (const Parameter* p : params) end = std::max(end, p->offset + p->local_shape.numel());
  return end;
}

// The sentence-pair classifier: two classes, replicated (not vocab-parallel).
constexpr kernels::VocabSlice kTwoClasses{2, 0, 2};

}  // namespace

void BertSpec::validate(int64_t tp_size) const {
  transformer.validate(tp_size);
  MT_CHECK(transformer.post_norm, "BERT uses post-LN blocks (transformer.post_norm = true)");
  MT_CHECK(!transformer.causal, "BERT attention is bidirectional (transformer.causal = false)");
  MT_CHECK(!transformer.rope, "BERT uses learned position embeddings, not rotary ones");
  MT_CHECK(vocab_size > 0 && padded_vocab_size >= vocab_size, "vocab size ", vocab_size,
           " / padded ", padded_vocab_size);
  MT_CHECK(padded_vocab_size % tp_size == 0, "padded vocab ", padded_vocab_size,
           " not divisible by tensor parallel size ", tp_size);
  MT_CHECK(max_positions >= transformer.seq_length, "max positions ", max_positions,
           " < seq length ", transformer.seq_length);
  MT_CHECK(num_token_types >= 0, "num_token_types must be >= 0, got ", num_token_types);
  MT_CHECK(embedding_dropout >= 0.0f && embedding_dropout < 1.0f, "embedding dropout ",
           embedding_dropout, " outside [0, 1)");
}

BertSpec make_bert_spec(int64_t num_layers, int64_t hidden, int64_t heads, int64_t ffn,
                        int64_t seq_length, int64_t max_positions, int64_t vocab_size,
                        int64_t padded_vocab_size, bool binary_head, float hidden_dropout,
                        float attention_dropout) {
  BertSpec s;
  auto& t = s.transformer;
  t.num_layers = num_layers;
  t.hidden = hidden;
  t.heads = heads;
  t.query_groups = heads;
  t.ffn = ffn;
  t.seq_length = seq_length;
  t.norm = Norm::Kind::LayerNorm;
  t.bias = true;
  t.causal = false;
  t.post_norm = true;
  t.norm_eps = 1e-12f;
  t.hidden_dropout = hidden_dropout;
  t.attention_dropout = attention_dropout;
  s.vocab_size = vocab_size;
  s.padded_vocab_size = padded_vocab_size;
  s.max_positions = max_positions;
  s.binary_head = binary_head;
  s.embedding_dropout = hidden_dropout;
  return s;
}

BertModel::BertModel(const BertSpec& spec, ParamStore& store, parallel::Communicator& tp,
                     const ModelStage& stage, std::shared_ptr<RecomputeWorkspace> workspace)
    : spec_(spec),
      device_(store.device()),
      stage_(stage),
      tp_(&tp),
      replicated_(parallel::make_single_process_communicator()) {
  spec.validate(tp.size());
  const auto& t = spec.transformer;
  stage_ = stage_.resolved(t.num_layers);
  const bool sp = t.sequence_parallel && tp.size() > 1;
  // Registration order embeddings -> blocks -> heads puts the heads lowest in the buffer, so
  // backward's grads_ready watermarks only grow. The word embeddings live on the first stage;
  // the last stage holds a copy for the tied decoder (same name: same initial values).
  if (stage_.pre_process || stage_.post_process) {
    units_.word = store.begin_unit();
    word_embed_ = std::make_unique<Embedding>(store, "embedding.word_embeddings",
                                              spec.padded_vocab_size, t.hidden, tp, t.init_std, sp);
  }
  if (stage_.pre_process) {
    units_.embeddings = store.begin_unit();
    // Replicated tables and norm; with sequence parallelism each rank sees only its positions,
    // so their gradients are partial over tp.
    pos_embed_ =
        std::make_unique<Embedding>(store, "embedding.position_embeddings", spec.max_positions,
                                    t.hidden, *replicated_, t.init_std);
    pos_embed_->table().tp_partial_grad = sp;
    if (spec.num_token_types > 0) {
      type_embed_ =
          std::make_unique<Embedding>(store, "embedding.tokentype_embeddings", spec.num_token_types,
                                      t.hidden, *replicated_, t.init_std);
      type_embed_->table().tp_partial_grad = sp;
    }
    emb_norm_ = std::make_unique<Norm>(store, "embedding.norm", t.hidden, Norm::Kind::LayerNorm,
                                       t.norm_eps, sp);
  }
  if (t.recompute != Recompute::None && !workspace)
    workspace = std::make_shared<RecomputeWorkspace>();
  for (int64_t l = stage_.first_layer; l < stage_.first_layer + stage_.num_layers; ++l) {
    units_.layers.push_back(
        layer_unit(store, static_cast<size_t>(l - stage_.first_layer), t.unit_layers));
    blocks_.push_back(std::make_unique<TransformerBlock>(store, "layers." + std::to_string(l), l, t,
                                                         tp, workspace));
  }
  if (!stage_.post_process) return;
  units_.head = store.begin_unit();

  // MLM transform: replicated; it sees [S/tp] rows with sequence parallelism (partial grads).
  transform_ = std::make_unique<Linear>(store, "lm_head.dense", t.hidden, t.hidden, true,
                                        TPMode::None, *replicated_, t.init_std);
  std::vector<Parameter*> transform_params;
  transform_->collect_params(transform_params);
  for (Parameter* p : transform_params) p->tp_partial_grad = sp;
  head_norm_ = std::make_unique<Norm>(store, "lm_head.norm", t.hidden, Norm::Kind::LayerNorm,
                                      t.norm_eps, sp);
  // The decoder bias follows the vocab split of the tied table.
  ShardSpec bias_shard;
  if (tp.size() > 1) bias_shard = ShardSpec{0, ShardAxis::Tensor, tp.rank(), tp.size()};
  output_bias_ = &store.add("lm_head.bias", Shape{spec.padded_vocab_size},
                            {ParamInit::Kind::Zeros, 0.0f}, false, bias_shard);
  if (spec.binary_head) {
    // Computed redundantly on every tp rank from the full [CLS] rows: identical gradients.
    pooler_ = std::make_unique<Linear>(store, "pooler.dense", t.hidden, t.hidden, true,
                                       TPMode::None, *replicated_, t.init_std);
    binary_ = std::make_unique<Linear>(store, "binary_head", t.hidden, 2, true, TPMode::None,
                                       *replicated_, t.init_std);
  }
}

std::unique_ptr<ModelActivations> BertModel::make_activations() const {
  return std::make_unique<BertActivations>();
}

namespace {
// Activations come from make_activations() of a BertModel; anything else is a caller bug.
BertActivations& bert_acts(ModelActivations& act) {
  auto* a = dynamic_cast<BertActivations*>(&act);
  MT_CHECK(a != nullptr, "BertModel given activations made by another model");
  return *a;
}
const BertActivations& bert_acts(const ModelActivations& act) {
  return bert_acts(const_cast<ModelActivations&>(act));
}
}  // namespace

const Tensor& BertModel::output(const ModelActivations& act) const {
  const BertActivations& a = bert_acts(act);
  MT_CHECK(a.last_hidden != nullptr, "stage output requested before forward");
  return *a.last_hidden;
}

const Tensor& BertModel::token_losses(const ModelActivations& act) const {
  return bert_acts(act).losses;
}

ActivationSlice BertModel::slice(const MicroBatch& mb, int64_t local_seq) const {
  return activation_slice(mb.info, local_seq, *tp_, sp());
}

DropoutSite BertModel::embedding_dropout_site(const MicroBatch& mb) const {
  // Layer index num_layers is past every block: no collision with the blocks' sites.
  const auto& t = spec_.transformer;
  return DropoutSite{t.seed, mb.info.iteration, t.num_layers, 7};
}

void BertModel::check_batch(const MicroBatch& mb) const {
  MT_CHECK(mb.tokens.ndim() == 2 && mb.tokens.dtype() == DType::I32,
           "micro-batch tokens must be int32 [S, B], got ", mb.tokens.shape().str());
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1);
  MT_CHECK(S <= spec_.transformer.seq_length, "micro-batch sequence ", S,
           " longer than seq_length ", spec_.transformer.seq_length);
  MT_CHECK(!sp() || S % tp_->size() == 0, "sequence ", S, " not divisible by tensor parallel size ",
           tp_->size());
  if (given(mb.padding_mask))
    MT_CHECK(mb.padding_mask.shape() == Shape({B, S}) && mb.padding_mask.dtype() == DType::U8,
             "padding_mask must be uint8 [B, S] = [", B, ", ", S, "], got ",
             mb.padding_mask.shape().str());
  if (stage_.pre_process && given(mb.token_types)) {
    MT_CHECK(mb.token_types.shape() == mb.tokens.shape() && mb.token_types.dtype() == DType::I32,
             "token_types must be int32 [S, B] like tokens, got ", mb.token_types.shape().str());
    const Tensor host_types = mb.token_types.to(Device::CPU);
    const int32_t* types = host_types.data<int32_t>();
    for (int64_t i = 0; i < mb.token_types.numel(); ++i)
      MT_CHECK(types[i] >= 0 && types[i] < std::max<int64_t>(spec_.num_token_types, 1),
               "token type ", types[i], " outside [0, ", spec_.num_token_types, ")");
  }
  if (!stage_.post_process) return;
  MT_CHECK(mb.labels.shape() == mb.tokens.shape() && mb.labels.dtype() == DType::I32,
           "labels must be int32 [S, B] like tokens, got ", mb.labels.shape().str());
  if (spec_.binary_head) {
    MT_CHECK(
        given(mb.nsp_labels) && mb.nsp_labels.numel() == B && mb.nsp_labels.dtype() == DType::I32,
        "the binary head needs int32 nsp_labels [", B, "]");
    const Tensor host_nsp = mb.nsp_labels.to(Device::CPU);
    const int32_t* nsp = host_nsp.data<int32_t>();
    for (int64_t b = 0; b < B; ++b)
      MT_CHECK(nsp[b] == 0 || nsp[b] == 1, "nsp label ", nsp[b], " is not 0 or 1");
  }
}

void BertModel::embed(BertActivations& a, const MicroBatch& mb, int64_t Sl) const {
  const int64_t B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  const ActivationSlice where = slice(mb, Sl);
  Tensor& x = ensure(a.embedded, {Sl, B, D}, act_dtype(), device_);
  word_embed_->forward(a.word, mb.tokens, x);
  // Replicated tables look up only this rank's rows [seq_offset, seq_offset + Sl).
  const Tensor& pos = a.positions.get(Sl, B, where.seq_offset, device_);
  Tensor& rows = ensure(a.scratch, {Sl, B, D}, act_dtype(), device_);
  pos_embed_->forward(a.pos, pos, rows);
  ops::add_inplace(x, rows);
  if (type_embed_) {
    Tensor& types = ensure(a.types, {Sl, B}, DType::I32, device_);
    if (given(mb.token_types))
      types.copy_from(mb.token_types.slice(where.seq_offset, where.seq_offset + Sl));
    else
      types.zero_();  // no segments given: everything is segment A
    type_embed_->forward(a.type, types, rows);
    ops::add_inplace(x, rows);
  }
  emb_norm_->forward(a.emb_norm, x, ensure(a.emb_norm_out, {Sl, B, D}, act_dtype(), device_));
  if (mb.info.training && spec_.embedding_dropout > 0.0f)
    dropout_sbd_forward(a.emb_norm_out,
                        ensure(a.embedded_dropped, {Sl, B, D}, act_dtype(), device_),
                        spec_.embedding_dropout, embedding_dropout_site(mb), where);
}

LossSums BertModel::forward(ModelActivations& act, const MicroBatch& mb,
                            const Tensor* hidden_in) const {
  BertActivations& a = bert_acts(act);
  check_batch(mb);
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  const int64_t Sl = sp() ? S / tp_->size() : S;
  const uint8_t* key_mask = given(mb.padding_mask) ? mb.padding_mask.data<uint8_t>() : nullptr;
  a.blocks.resize(blocks_.size());

  const Tensor* x = hidden_in;
  if (stage_.pre_process) {
    UnitUse use(unit_hooks_, {units_.word, units_.embeddings}, false);
    embed(a, mb, Sl);
    use.end();
    const bool dropped = mb.info.training && spec_.embedding_dropout > 0.0f;
    x = dropped ? &a.embedded_dropped : &a.emb_norm_out;
  }
  MT_CHECK(x != nullptr && x->numel() == Sl * B * D, "stage input must be [", Sl, ", ", B, ", ", D,
           "]");
  for (size_t l = 0; l < blocks_.size(); ++l) {
    layer_unit_begins(l, false);
    x = &blocks_[l]->forward(a.blocks[l], *x, mb.info, key_mask);
    layer_unit_ends(l, false);
  }
  a.last_hidden = x;
  LossSums sums;
  if (!stage_.post_process) return sums;
  UnitUse use(unit_hooks_, {units_.head, units_.word}, false);
  sums.lm = lm_head_forward(a, mb, *x);
  if (spec_.binary_head) sums.aux = binary_head_forward(a, mb, *x);
  use.end();
  return sums;
}

double BertModel::lm_head_forward(BertActivations& a, const MicroBatch& mb, const Tensor& h) const {
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  const int64_t N = S * B, Sl = h.dim(0);
  transform_->forward(a.transform, h, ensure(a.transform_out, {Sl, B, D}, act_dtype(), device_));
  ops::gelu_forward(a.transform_out, ensure(a.gelu_out, {Sl, B, D}, act_dtype(), device_),
                    spec_.transformer.gelu);
  head_norm_->forward(a.head_norm, a.gelu_out,
                      ensure(a.head_out, {Sl, B, D}, act_dtype(), device_));
  const Tensor* hn = &a.head_out;
  if (sp()) {  // the vocab-parallel decoder needs every position
    tensor_parallel::gather_from_sequence_forward(
        *tp_, a.head_out, ensure(a.head_full, {S, B, D}, act_dtype(), device_));
    hn = &a.head_full;
  }
  const kernels::VocabSlice vs = vocab_slice(spec_.padded_vocab_size, spec_.vocab_size, *tp_);
  Tensor& logits = ensure(a.logits, {N, vs.V_local}, act_dtype(), device_);
  ops::linear_forward(*hn, word_embed_->table().weight, &output_bias_->weight, logits);
  vocab_parallel_cross_entropy(logits, mb.labels, vs, kIgnoreIndex, *tp_,
                               ensure(a.losses, {N}, DType::F32, device_),
                               ensure(a.lse, {N}, DType::F32, device_));
  return sum_target_losses(a.losses, mb.labels);
}

double BertModel::binary_head_forward(BertActivations& a, const MicroBatch& mb,
                                      const Tensor& h) const {
  const int64_t B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  // [CLS] is sequence position 0: rows [0, B) of [S, B, D]. With sequence parallelism only tp
  // rank 0 holds them; it broadcasts them and every rank computes the (replicated) head.
  Tensor& cls = ensure(a.cls, {B, D}, act_dtype(), device_);
  if (!sp() || tp_->rank() == 0) cls.copy_from(h.flat_view(0, {B, D}));
  if (sp()) tp_->broadcast(cls, 0);
  pooler_->forward(a.pooler, cls, ensure(a.pooler_out, {B, D}, act_dtype(), device_));
  ops::tanh_forward(a.pooler_out, ensure(a.pooled, {B, D}, act_dtype(), device_));
  binary_->forward(a.binary, a.pooled, ensure(a.nsp_logits, {B, 2}, act_dtype(), device_));
  ops::cross_entropy_forward(a.nsp_logits, mb.nsp_labels, kTwoClasses, kIgnoreIndex,
                             ensure(a.nsp_losses, {B}, DType::F32, device_),
                             ensure(a.nsp_lse, {B}, DType::F32, device_));
  return sum_values(a.nsp_losses);
}

void BertModel::lm_head_backward(BertActivations& a, const MicroBatch& mb, float weight,
                                 Tensor& d_hidden) const {
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  const int64_t N = S * B, Sl = d_hidden.dim(0);
  const kernels::VocabSlice vs = vocab_slice(spec_.padded_vocab_size, spec_.vocab_size, *tp_);
  fill(ensure(a.dlosses, {N}, DType::F32, device_), weight);
  // d(logits) overwrites the logits buffer.
  ops::cross_entropy_backward(a.logits, mb.labels, vs, kIgnoreIndex, a.lse, a.dlosses, a.logits);
  // Table and bias gradients of this rank's vocab slice are complete (all rows, own columns);
  // the hidden-state gradient is partial over the vocab slices: sum it (and split with SP).
  Parameter& table = word_embed_->table();
  Tensor& d_head = ensure(a.d_head, {Sl, B, D}, act_dtype(), device_);
  if (sp()) {
    Tensor& full = ensure(a.d_head_full, {S, B, D}, act_dtype(), device_);
    ops::linear_backward(a.head_full, table.weight, a.logits, &full, &table.grad,
                         &output_bias_->grad);
    tensor_parallel::gather_from_sequence_backward(*tp_, full, d_head);
  } else {
    ops::linear_backward(a.head_out, table.weight, a.logits, &d_head, &table.grad,
                         &output_bias_->grad);
    tensor_parallel::copy_to_region_backward(*tp_, d_head);
  }
  Tensor& d_gelu = ensure(a.d_gelu, {Sl, B, D}, act_dtype(), device_);
  head_norm_->backward(a.head_norm, d_head, d_gelu);
  // d_head now holds d(transform_out)
  ops::gelu_backward(a.transform_out, d_gelu, d_head, spec_.transformer.gelu);
  transform_->backward(a.transform, d_head, &d_hidden);
}

void BertModel::binary_head_backward(BertActivations& a, const MicroBatch& mb, float weight,
                                     Tensor& d_hidden) const {
  const int64_t B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  fill(ensure(a.d_nsp, {B}, DType::F32, device_), weight);
  ops::cross_entropy_backward(a.nsp_logits, mb.nsp_labels, kTwoClasses, kIgnoreIndex, a.nsp_lse,
                              a.d_nsp, a.nsp_logits);
  binary_->backward(a.binary, a.nsp_logits, &ensure(a.d_pooled, {B, D}, act_dtype(), device_));
  ops::tanh_backward(a.pooled, a.d_pooled, a.d_pooled);
  pooler_->backward(a.pooler, a.d_pooled, &ensure(a.d_cls, {B, D}, act_dtype(), device_));
  // Only the rank whose slice holds position 0 owns those rows' gradient (with SP); without
  // SP every rank holds the full (identical) residual-stream gradient.
  if (sp() && tp_->rank() != 0) return;
  Tensor rows = d_hidden.flat_view(0, {B, D});
  ops::add_inplace(rows, a.d_cls);
}

void BertModel::embed_backward(BertActivations& a, const MicroBatch& mb, Tensor& grad,
                               Tensor& other) const {
  Tensor* g = &grad;
  if (mb.info.training && spec_.embedding_dropout > 0.0f) {
    dropout_sbd_backward(grad, other, spec_.embedding_dropout, embedding_dropout_site(mb),
                         slice(mb, grad.dim(0)));
    g = &other;
  }
  Tensor& d_sum = g == &grad ? other : grad;
  emb_norm_->backward(a.emb_norm, *g, d_sum);
  word_embed_->backward(a.word, d_sum);
  pos_embed_->backward(a.pos, d_sum);
  if (type_embed_) type_embed_->backward(a.type, d_sum);
}

void BertModel::backward(ModelActivations& act, const MicroBatch& mb, const LossWeights& weights,
                         const GradsReady& grads_ready, const Tensor* d_hidden_out,
                         Tensor* d_hidden_in) const {
  BertActivations& a = bert_acts(act);
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1), D = spec_.transformer.hidden;
  const int64_t Sl = sp() ? S / tp_->size() : S;
  const uint8_t* key_mask = given(mb.padding_mask) ? mb.padding_mask.data<uint8_t>() : nullptr;

  // Buffer layout is reverse registration order: heads, blocks L-1..0, then the embeddings
  // (which the tied decoder also feeds), so watermarks only grow.
  Tensor* grad = &ensure(a.grad_a, {Sl, B, D}, act_dtype(), device_);
  Tensor* other = &ensure(a.grad_b, {Sl, B, D}, act_dtype(), device_);
  if (stage_.post_process) {
    UnitUse use(unit_hooks_, {units_.head, units_.word}, true);
    lm_head_backward(a, mb, weights.lm, *grad);
    std::vector<Parameter*> tail{output_bias_};
    transform_->collect_params(tail);
    head_norm_->collect_params(tail);
    if (spec_.binary_head) {
      binary_head_backward(a, mb, weights.aux, *grad);
      pooler_->collect_params(tail);
      binary_->collect_params(tail);
    }
    use.end();
    if (grads_ready) grads_ready(params_end(tail));
  } else {
    MT_CHECK(d_hidden_out != nullptr && d_hidden_out->numel() == Sl * B * D,
             "stage backward needs the gradient of its output [", Sl, ", ", B, ", ", D, "]");
    grad->copy_from(*d_hidden_out);
  }
  for (size_t l = blocks_.size(); l-- > 0;) {
    layer_unit_begins(l, true);
    blocks_[l]->backward(a.blocks[l], *grad, *other, mb.info, key_mask);
    layer_unit_ends(l, true);
    std::swap(grad, other);
    if (grads_ready) grads_ready(blocks_[l]->grad_watermark());
  }
  if (stage_.pre_process) {
    UnitUse use(unit_hooks_, {units_.word, units_.embeddings}, true);
    embed_backward(a, mb, *grad, *other);
    use.end();
  } else {
    MT_CHECK(d_hidden_in != nullptr, "stage backward needs a buffer for its input gradient");
    d_hidden_in->copy_from(*grad);
  }
  if (grads_ready) grads_ready(std::numeric_limits<int64_t>::max());
}

}  // namespace megatron::models
