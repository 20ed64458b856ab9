#include "megatron/transformer/block.h"

#include <cmath>

#include "megatron/backend/ops.h"

namespace megatron {

Recompute parse_recompute(std::string_view name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  MT_INPUT_CHECK(false, "recompute must be none, selective or full, got '", name, "'");
  return Recompute::None;
}

void TransformerSpec::validate(int64_t tp_size) const {
  MT_CHECK(num_layers > 0 && hidden > 0 && heads > 0 && ffn > 0 && seq_length > 0,
           "transformer sizes must be positive");
  MT_CHECK(hidden % heads == 0, "hidden size ", hidden, " not divisible by heads ", heads);
  MT_CHECK(query_groups > 0 && heads % query_groups == 0, "heads ", heads,
           " not divisible by query groups ", query_groups);
  MT_CHECK(query_groups % tp_size == 0, "query groups ", query_groups,
           " not divisible by tensor parallel size ", tp_size);
  MT_CHECK(!rope || head_dim() % 2 == 0, "rotary embeddings need an even head dim");
  MT_CHECK(!sequence_parallel || seq_length % tp_size == 0, "sequence length ", seq_length,
           " not divisible by tensor parallel size ", tp_size, " (sequence parallelism)");
}

TransformerBlock::TransformerBlock(ParamStore& store, const std::string& prefix,
                                   int64_t layer_index, const TransformerSpec& spec,
                                   parallel::Communicator& tp,
                                   std::shared_ptr<RecomputeWorkspace> workspace)
    : spec_(spec), layer_(layer_index), tp_(&tp), workspace_(std::move(workspace)) {
  if (spec.recompute == Recompute::None)
    workspace_.reset();
  else if (!workspace_)
    workspace_ = std::make_shared<RecomputeWorkspace>();
  spec.validate(tp.size());
  const int64_t D = spec.hidden, Dh = spec.head_dim(), H = spec.heads, G = spec.query_groups;
  local_heads_ = H / tp.size();
  local_groups_ = G / tp.size();
  // Megatron's scaled init for the output projections of the residual branches.
  const float out_std = spec.init_std / std::sqrt(2.0f * static_cast<float>(spec.num_layers));
  const bool sp = spec.sequence_parallel && tp.size() > 1;
  ln1_ = std::make_unique<Norm>(store, prefix + ".input_norm", D, spec.norm, spec.norm_eps, sp);
  // Fused QKV rows grouped per query group: [G, H/G + 2, Dh] x D, split over groups.
  qkv_ = std::make_unique<Linear>(store, prefix + ".attention.qkv", D, G * (H / G + 2) * Dh,
                                  spec.bias, TPMode::Column, tp, spec.init_std, Shape{}, sp);
  proj_ = std::make_unique<Linear>(store, prefix + ".attention.proj", H * Dh, D, spec.bias,
                                   TPMode::Row, tp, out_std, Shape{}, sp);
  ln2_ = std::make_unique<Norm>(store, prefix + ".post_attention_norm", D, spec.norm, spec.norm_eps,
                                sp);
  const int64_t fc1_out = spec.swiglu ? 2 * spec.ffn : spec.ffn;
  const Shape fc1_shape = spec.swiglu ? Shape{2, spec.ffn, D} : Shape{};
  fc1_ = std::make_unique<Linear>(store, prefix + ".mlp.fc1", D, fc1_out, spec.bias, TPMode::Column,
                                  tp, spec.init_std, fc1_shape, sp);
  fc2_ = std::make_unique<Linear>(store, prefix + ".mlp.fc2", spec.ffn, D, spec.bias, TPMode::Row,
                                  tp, out_std, Shape{}, sp);
}

int64_t TransformerBlock::grad_watermark() const {
  std::vector<Parameter*> params;
  for (const Norm* n : {ln1_.get(), ln2_.get()}) n->collect_params(params);
  for (const Linear* l : {qkv_.get(), proj_.get(), fc1_.get(), fc2_.get()})
    l->collect_params(params);
  int64_t end = 0;
  for (const Parameter* p : params) end = std::max(end, p->offset + p->local_shape.numel());
  return end;
}

kernels::cpu::AttentionShape TransformerBlock::attention_shape(int64_t S, int64_t B,
                                                               int64_t batch_offset) const {
  kernels::cpu::AttentionShape s;
  s.S = S;
  s.B = B;
  s.H = local_heads_;
  s.G = local_groups_;
  s.Dh = spec_.head_dim();
  s.head_offset = local_heads_ * tp_->rank();
  s.total_heads = spec_.heads;
  s.batch_offset = batch_offset;
  return s;
}

kernels::cpu::AttentionOptions TransformerBlock::attention_options(const MicroBatchInfo& mb,
                                                                   const uint8_t* key_mask) const {
  kernels::cpu::AttentionOptions o;
  o.scale = 1.0f / std::sqrt(static_cast<float>(spec_.head_dim()));
  o.causal = spec_.causal;
  o.key_mask = key_mask;
  o.dropout_p = mb.training ? spec_.attention_dropout : 0.0f;
  o.seed = spec_.seed;
  o.stream = site(mb, 0).stream();
  return o;
}

DropoutSite TransformerBlock::site(const MicroBatchInfo& mb, int64_t which) const {
  return DropoutSite{spec_.seed, mb.iteration, layer_, which};
}

ActivationSlice TransformerBlock::slice(const MicroBatchInfo& mb, int64_t local_seq) const {
  return activation_slice(mb.batch_offset, local_seq, *tp_, sp());
}

Tensor& TransformerBlock::probs_of(Ctx& c) const {
  return spec_.recompute == Recompute::Selective ? workspace_->block.probs : c.probs;
}

void TransformerBlock::recompute_probs(Ctx& c, const kernels::cpu::AttentionShape& as,
                                       const kernels::cpu::AttentionOptions& ao) const {
  // Same qkv (after rope), options and dropout stream as the forward: the same values.
  ops::attention_forward(as, ao, c.qkv_out, ensure(c.d_attn, c.attn_out.shape(), act()),
                         ensure(probs_of(c), {as.B, as.H, as.S, as.S}));
}

void TransformerBlock::attention_core_forward(Ctx& c, const kernels::cpu::AttentionShape& as,
                                              const kernels::cpu::AttentionOptions& ao) const {
  Tensor& out = ensure(c.attn_out, {as.S, as.B, as.H * as.Dh}, act());
  if (spec_.flash_attention)
    ops::flash_attention_forward(as, ao, c.qkv_out, out, ensure(c.lse, {as.B, as.H, as.S}));
  else
    ops::attention_forward(as, ao, c.qkv_out, out, ensure(probs_of(c), {as.B, as.H, as.S, as.S}));
}

void TransformerBlock::attention_core_backward(Ctx& c, const kernels::cpu::AttentionShape& as,
                                               const kernels::cpu::AttentionOptions& ao) const {
  // (Unfused under selective recompute: the probabilities were recomputed before the projection
  // backward, which then overwrote recompute_probs' scratch c.d_attn with the real gradient.)
  Tensor& d_qkv = ensure(c.d_qkv, c.qkv_out.shape(), act());
  if (spec_.flash_attention) {
    ops::flash_attention_backward(as, ao, c.qkv_out, c.attn_out, c.lse, c.d_attn, d_qkv);
    return;
  }
  ops::attention_backward(as, ao, c.qkv_out, probs_of(c), c.d_attn, d_qkv);
}

void TransformerBlock::run_forward(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                                   const uint8_t* key_mask) const {
  if (spec_.post_norm)
    forward_post_norm(c, x, out, mb, key_mask);
  else
    forward_pre_norm(c, x, out, mb, key_mask);
}

void TransformerBlock::run_backward(Ctx& c, const Tensor& d_out, Tensor& dx,
                                    const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  if (spec_.post_norm)
    backward_post_norm(c, d_out, dx, mb, key_mask);
  else
    backward_pre_norm(c, d_out, dx, mb, key_mask);
}

const Tensor& TransformerBlock::forward(Ctx& c, const Tensor& x, const MicroBatchInfo& mb,
                                        const uint8_t* key_mask) const {
  if (spec_.recompute == Recompute::Full) {
    // Keep the input (a view: the previous block's checkpointed output, the embeddings or
    // the received stage input) and the output; everything else is transient.
    c.input = x;
    run_forward(workspace_->block, x, c.out, mb, key_mask);
  } else {
    run_forward(c, x, c.out, mb, key_mask);
  }
  return c.out;
}

void TransformerBlock::backward(Ctx& c, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                                const uint8_t* key_mask) const {
  if (spec_.recompute == Recompute::Full) {
    MT_CHECK(c.input.numel() == d_out.numel(), "layer ", layer_,
             ": full-recompute backward without a forward on this context");
    Ctx& w = workspace_->block;
    run_forward(w, c.input, w.out, mb, key_mask);
    run_backward(w, d_out, dx, mb, key_mask);
    return;
  }
  run_backward(c, d_out, dx, mb, key_mask);
}

// The two residual branches, shared by the pre-LN and post-LN arrangements. `in` is the
// branch input ([Sl, B, D]; a sequence slice with sequence parallelism): the attention branch
// leaves drop(proj(attn(qkv(in)))) in c.proj_out, the MLP branch drop(fc2(act(fc1(in)))) in
// c.fc2_out. Their backward take the gradient of that output (c.d_proj may hold it afterwards:
// the dropout gradient is written there) and write the gradient of `in` into d_in.
void TransformerBlock::attention_branch_forward(Ctx& c, const Tensor& in, const MicroBatchInfo& mb,
                                                const uint8_t* key_mask) const {
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden, Dh = spec_.head_dim();
  const int64_t S = sp() ? Sl * tp_->size() : Sl;
  const int64_t qkv_width = local_groups_ * (local_heads_ / local_groups_ + 2) * Dh;
  const auto as = attention_shape(S, B, mb.batch_offset);
  qkv_->forward(c.qkv, in, ensure(c.qkv_out, {S, B, qkv_width}, act()));
  if (spec_.rope) ops::rope_forward(as, c.qkv_out, spec_.rope_theta, 0);
  attention_core_forward(c, as, attention_options(mb, key_mask));
  proj_->forward(c.proj, c.attn_out, ensure(c.proj_out, {Sl, B, D}, act()));
  if (hidden_dropout_on(mb))
    dropout_sbd_forward(c.proj_out, c.proj_out, spec_.hidden_dropout, site(mb, 1), slice(mb, Sl));
}

void TransformerBlock::mlp_branch_forward(Ctx& c, const Tensor& in,
                                          const MicroBatchInfo& mb) const {
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden;
  const int64_t S = sp() ? Sl * tp_->size() : Sl;
  fc1_->forward(c.fc1, in, ensure(c.fc1_out, {S, B, fc1_->local_out()}, act()));
  ensure(c.act_out, {S, B, fc2_->local_in()}, act());
  if (spec_.swiglu)
    ops::swiglu_forward(c.fc1_out, c.act_out);
  else
    ops::gelu_forward(c.fc1_out, c.act_out);
  fc2_->forward(c.fc2, c.act_out, ensure(c.fc2_out, {Sl, B, D}, act()));
  if (hidden_dropout_on(mb))
    dropout_sbd_forward(c.fc2_out, c.fc2_out, spec_.hidden_dropout, site(mb, 2), slice(mb, Sl));
}

// The gradient entering a branch through its output dropout: `d_out` itself without dropout,
// else its dropout gradient in c.d_proj.
const Tensor& TransformerBlock::through_branch_dropout(Ctx& c, const Tensor& d_out,
                                                       const MicroBatchInfo& mb,
                                                       int64_t which) const {
  if (!hidden_dropout_on(mb)) return d_out;
  const int64_t Sl = d_out.dim(0);
  dropout_sbd_backward(d_out, ensure(c.d_proj, d_out.shape(), act()), spec_.hidden_dropout,
                       site(mb, which), slice(mb, Sl));
  return c.d_proj;
}

void TransformerBlock::attention_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                                                 const MicroBatchInfo& mb,
                                                 const uint8_t* key_mask) const {
  const int64_t Sl = d_branch.dim(0), B = d_branch.dim(1);
  const int64_t S = sp() ? Sl * tp_->size() : Sl;
  const auto as = attention_shape(S, B, mb.batch_offset);
  const auto ao = attention_options(mb, key_mask);
  const Tensor& d_proj_out = through_branch_dropout(c, d_branch, mb, 1);
  if (spec_.recompute == Recompute::Selective && !spec_.flash_attention) recompute_probs(c, as, ao);
  proj_->backward(c.proj, d_proj_out, &ensure(c.d_attn, c.attn_out.shape(), act()));
  attention_core_backward(c, as, ao);
  if (spec_.rope) ops::rope_backward(as, c.d_qkv, spec_.rope_theta, 0);
  qkv_->backward(c.qkv, c.d_qkv, &d_in);
}

void TransformerBlock::mlp_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                                           const MicroBatchInfo& mb) const {
  const Tensor& d_fc2_out = through_branch_dropout(c, d_branch, mb, 2);
  fc2_->backward(c.fc2, d_fc2_out, &ensure(c.d_act, c.act_out.shape(), act()));
  ensure(c.d_fc1, c.fc1_out.shape(), act());
  if (spec_.swiglu)
    ops::swiglu_backward(c.fc1_out, c.d_act, c.d_fc1);
  else
    ops::gelu_backward(c.fc1_out, c.d_act, c.d_fc1);
  fc1_->backward(c.fc1, c.d_fc1, &d_in);
}

// Pre-LN: mid = x + attn(LN1(x)); out = mid + mlp(LN2(mid)).
void TransformerBlock::forward_pre_norm(Ctx& c, const Tensor& x, Tensor& out,
                                        const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = x.dim(0), B = x.dim(1), D = spec_.hidden;
  ln1_->forward(c.ln1, x, ensure(c.ln1_out, {Sl, B, D}, act()));
  attention_branch_forward(c, c.ln1_out, mb, key_mask);
  ops::add(x, c.proj_out, ensure(c.mid, {Sl, B, D}, act()));
  ln2_->forward(c.ln2, c.mid, ensure(c.ln2_out, {Sl, B, D}, act()));
  mlp_branch_forward(c, c.ln2_out, mb);
  ops::add(c.mid, c.fc2_out, ensure(out, {Sl, B, D}, act()));
}

void TransformerBlock::backward_pre_norm(Ctx& c, const Tensor& d_out, Tensor& dx,
                                         const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = d_out.dim(0), B = d_out.dim(1), D = spec_.hidden;
  mlp_branch_backward(c, d_out, ensure(c.d_ln, {Sl, B, D}, act()), mb);
  ln2_->backward(c.ln2, c.d_ln, ensure(c.d_mid, {Sl, B, D}, act()));
  ops::add_inplace(c.d_mid, d_out);  // residual
  attention_branch_backward(c, c.d_mid, c.d_ln, mb, key_mask);
  ln1_->backward(c.ln1, c.d_ln, dx);
  ops::add_inplace(dx, c.d_mid);  // residual
}

// Post-LN: the branches read the residual stream directly and the norms sit after each
// residual sum: h = LN1(x + attn(x)) (c.mid, c.ln1_out); out = LN2(h + mlp(h)) (c.sum2). With
// sequence parallelism the norms and sums run on [S/tp] slices exactly as in pre-LN.
void TransformerBlock::forward_post_norm(Ctx& c, const Tensor& x, Tensor& out,
                                         const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = x.dim(0), B = x.dim(1), D = spec_.hidden;
  attention_branch_forward(c, x, mb, key_mask);
  ops::add(x, c.proj_out, ensure(c.mid, {Sl, B, D}, act()));
  ln1_->forward(c.ln1, c.mid, ensure(c.ln1_out, {Sl, B, D}, act()));
  mlp_branch_forward(c, c.ln1_out, mb);
  ops::add(c.ln1_out, c.fc2_out, ensure(c.sum2, {Sl, B, D}, act()));
  ln2_->forward(c.ln2, c.sum2, ensure(out, {Sl, B, D}, act()));
}

void TransformerBlock::backward_post_norm(Ctx& c, const Tensor& d_out, Tensor& dx,
                                          const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = d_out.dim(0), B = d_out.dim(1), D = spec_.hidden;
  // d_mid holds d(sum2), then d(mid); d_ln holds d(h).
  ln2_->backward(c.ln2, d_out, ensure(c.d_mid, {Sl, B, D}, act()));
  mlp_branch_backward(c, c.d_mid, ensure(c.d_ln, {Sl, B, D}, act()), mb);
  ops::add_inplace(c.d_ln, c.d_mid);  // residual into h
  ln1_->backward(c.ln1, c.d_ln, c.d_mid);
  attention_branch_backward(c, c.d_mid, dx, mb, key_mask);
  ops::add_inplace(dx, c.d_mid);  // residual into x
}

}  // namespace megatron
