#include "megatron/transformer/block.h"

#include <algorithm>

#include "megatron/backend/ops.h"

namespace megatron {

TransformerBlock::TransformerBlock(ParamStore& store, const std::string& prefix,
                                   int64_t layer_index, const TransformerSpec& spec,
                                   parallel::Communicator& tp,
                                   std::shared_ptr<RecomputeWorkspace> workspace,
                                   const BlockSubmodules& submodules)
    : spec_(spec),
      device_(store.device()),
      layer_(layer_index),
      tp_(&tp),
      workspace_(std::move(workspace)) {
  if (spec.recompute == Recompute::None)
    workspace_.reset();
  else if (!workspace_)
    workspace_ = std::make_shared<RecomputeWorkspace>();
  spec.validate(tp.size());
  MT_CHECK(submodules.attention && submodules.mlp, "block '", prefix,
           "': the attention and MLP factories must both be set");
  const int64_t D = spec.hidden;
  const bool sp = spec.sequence_parallel && tp.size() > 1;
  const SubmoduleArgs args{store, prefix, layer_index,
                           spec_, tp,     workspace_ ? workspace_->probs : nullptr};
  MT_CHECK(spec.input_norms || spec.output_norms, "block '", prefix, "' has no norms");
  MT_CHECK((spec.input_norms && !spec.output_norms) || !(spec.post_norm || spec.parallel_residual),
           "block '", prefix, "': output norms are for sequential pre-norm blocks");
  auto norm = [&](const char* name, bool present) {
    return present ? std::make_unique<Norm>(store, prefix + name, D, spec.norm, spec.norm_eps, sp,
                                            spec.norm_zero_centered_gamma)
                   : nullptr;
  };
  // Registration order (the parameter buffer's layout): norm 1, attention (its output norm),
  // norm 2, MLP (its output norm).
  ln1_ = norm(".input_norm", spec.input_norms);
  attention_ = submodules.attention(args);
  on1_ = norm(".attention_output_norm", spec.output_norms);
  ln2_ = norm(".post_attention_norm", spec.input_norms);
  mlp_ = submodules.mlp(args);
  on2_ = norm(".mlp_output_norm", spec.output_norms);
}

int64_t TransformerBlock::grad_watermark() const {
  std::vector<Parameter*> params;
  for (const auto* n : {&ln1_, &ln2_, &on1_, &on2_})
    if (*n) (*n)->collect_params(params);
  attention_->collect_params(params);
  mlp_->collect_params(params);
  // Expert weights live in their own region of the buffer, reduced over another group at the
  // end of the step: they do not move the watermark.
  int64_t end = 0;
  for (const Parameter* p : params)
    if (!p->expert && !p->frozen) end = std::max(end, p->offset + p->local_shape.numel());
  return end;
}

DropoutSite TransformerBlock::site(const MicroBatchInfo& mb, int64_t which) const {
  return DropoutSite{spec_.seed, mb.iteration, layer_, which};
}

ActivationSlice TransformerBlock::slice(const MicroBatchInfo& mb, int64_t local_seq) const {
  return activation_slice(mb, local_seq, *tp_, sp());
}

namespace {

// slot <- a state `layer` owns: the one in slot, else one parked in the Ctx, else a new one.
template <typename Layer>
void own_state(const Layer& layer, std::unique_ptr<LayerState>& slot,
               std::vector<std::unique_ptr<LayerState>>& parked) {
  if (slot && layer.owns(*slot)) return;
  auto it =
      std::find_if(parked.begin(), parked.end(), [&](const auto& s) { return layer.owns(*s); });
  std::unique_ptr<LayerState> mine;
  if (it != parked.end()) {
    mine = std::move(*it);
    parked.erase(it);
  } else {
    mine = layer.make_state();
  }
  if (slot) parked.push_back(std::move(slot));
  slot = std::move(mine);
}

}  // namespace

void TransformerBlock::run_forward(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                                   const uint8_t* key_mask) const {
  own_state(*attention_, c.attention, c.parked);
  own_state(*mlp_, c.mlp, c.parked);
  if (spec_.post_norm)
    forward_post_norm(c, x, out, mb, key_mask);
  else if (spec_.parallel_residual)
    forward_parallel(c, x, out, mb, key_mask);
  else
    forward_pre_norm(c, x, out, mb, key_mask);
}

void TransformerBlock::run_backward(Ctx& c, const Tensor& d_out, Tensor& dx,
                                    const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  MT_CHECK(c.attention && c.mlp, "layer ", layer_, ": backward without a forward on this context");
  if (spec_.post_norm)
    backward_post_norm(c, d_out, dx, mb, key_mask);
  else if (spec_.parallel_residual)
    backward_parallel(c, d_out, dx, mb, key_mask);
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
  // This micro-batch's own states: queued weight gradients may read them in place.
  MicroBatchInfo kept = mb;
  kept.layer_states_kept = true;
  run_backward(c, d_out, dx, kept, key_mask);
}

// The two residual branches, shared by the pre-LN and post-LN arrangements. `in` is the branch
// input ([Sl, B, D]; a sequence slice with sequence parallelism); a branch's output is its
// sub-layer's output with the residual dropout applied in place (drop(proj(attn(qkv(in)))),
// drop(fc2(act(fc1(in))))). Their backward take the gradient of that output and write the
// gradient of `in` into d_in.
const Tensor& TransformerBlock::attention_branch_forward(Ctx& c, const Tensor& in,
                                                         const MicroBatchInfo& mb,
                                                         const uint8_t* key_mask) const {
  Tensor& y = attention_->forward(*c.attention, in, mb, key_mask);
  return branch_output(y, on1_.get(), c.on1, c.attn_normed, mb, 1);
}

const Tensor& TransformerBlock::mlp_branch_forward(Ctx& c, const Tensor& in,
                                                   const MicroBatchInfo& mb) const {
  Tensor& y = mlp_->forward(*c.mlp, in, mb);
  return branch_output(y, on2_.get(), c.on2, c.mlp_normed, mb, 2);
}

// A sub-layer's output y through its output norm (into `normed`), if any, then the residual
// dropout (in place: the norm keeps its input, not its output).
Tensor& TransformerBlock::branch_output(Tensor& y, const Norm* out_norm, Norm::Ctx& norm_ctx,
                                        Tensor& normed, const MicroBatchInfo& mb,
                                        int64_t which) const {
  Tensor* r = &y;
  if (out_norm) {
    out_norm->forward(norm_ctx, y, ensure(normed, y.shape(), act(), device_));
    r = &normed;
  }
  if (hidden_dropout_on(mb))
    dropout_sbd_forward(*r, *r, spec_.hidden_dropout, site(mb, which), slice(mb, r->dim(0)));
  return *r;
}

// The gradient of a sub-layer's output from that of its branch output: through the dropout
// and the output norm, if any.
const Tensor& TransformerBlock::into_sublayer(Ctx& c, const Tensor& d_branch,
                                              const MicroBatchInfo& mb, int64_t which) const {
  const Tensor& d = through_branch_dropout(c, d_branch, mb, which);
  const Norm* out_norm = which == 1 ? on1_.get() : on2_.get();
  if (!out_norm) return d;
  out_norm->backward(which == 1 ? c.on1 : c.on2, d, ensure(c.d_normed, d.shape(), act(), device_));
  return c.d_normed;
}

// The gradient entering a branch through its output dropout: `d_out` itself without dropout,
// else its dropout gradient in c.d_branch.
const Tensor& TransformerBlock::through_branch_dropout(Ctx& c, const Tensor& d_out,
                                                       const MicroBatchInfo& mb,
                                                       int64_t which) const {
  if (!hidden_dropout_on(mb)) return d_out;
  const int64_t Sl = d_out.dim(0);
  dropout_sbd_backward(d_out, ensure(c.d_branch, d_out.shape(), act(), device_),
                       spec_.hidden_dropout, site(mb, which), slice(mb, Sl));
  return c.d_branch;
}

void TransformerBlock::attention_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                                                 const MicroBatchInfo& mb,
                                                 const uint8_t* key_mask) const {
  attention_->backward(*c.attention, into_sublayer(c, d_branch, mb, 1), d_in, mb, key_mask);
}

void TransformerBlock::mlp_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                                           const MicroBatchInfo& mb) const {
  mlp_->backward(*c.mlp, into_sublayer(c, d_branch, mb, 2), d_in, mb);
}

// Pre-LN: mid = x + attn(LN1(x)); out = mid + mlp(LN2(mid)) (without input norms the
// sub-layers read x and mid themselves).
void TransformerBlock::forward_pre_norm(Ctx& c, const Tensor& x, Tensor& out,
                                        const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = x.dim(0), B = x.dim(1), D = spec_.hidden;
  if (ln1_) ln1_->forward(c.ln1, x, ensure(c.ln1_out, {Sl, B, D}, act(), device_));
  const Tensor& attn = attention_branch_forward(c, ln1_ ? c.ln1_out : x, mb, key_mask);
  ops::add(x, attn, ensure(c.mid, {Sl, B, D}, act(), device_));
  if (ln2_) ln2_->forward(c.ln2, c.mid, ensure(c.ln2_out, {Sl, B, D}, act(), device_));
  const Tensor& mlp = mlp_branch_forward(c, ln2_ ? c.ln2_out : c.mid, mb);
  ops::add(c.mid, mlp, ensure(out, {Sl, B, D}, act(), device_));
}

void TransformerBlock::backward_pre_norm(Ctx& c, const Tensor& d_out, Tensor& dx,
                                         const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = d_out.dim(0), B = d_out.dim(1), D = spec_.hidden;
  // d_ln holds each sub-layer's input gradient in turn.
  mlp_branch_backward(c, d_out, ensure(c.d_ln, {Sl, B, D}, act(), device_), mb);
  Tensor& d_mid = ensure(c.d_mid, {Sl, B, D}, act(), device_);
  if (ln2_) {
    ln2_->backward(c.ln2, c.d_ln, d_mid);
    ops::add_inplace(d_mid, d_out);  // residual
  } else {
    ops::add(c.d_ln, d_out, d_mid);
  }
  attention_branch_backward(c, d_mid, c.d_ln, mb, key_mask);
  if (ln1_) {
    ln1_->backward(c.ln1, c.d_ln, dx);
    ops::add_inplace(dx, d_mid);  // residual
  } else {
    ops::add(c.d_ln, d_mid, dx);
  }
}

// Parallel residual (GPT-NeoX): both branches read the block input through their own norms,
// mid = x + attn(LN1(x)) (c.mid); out = mid + mlp(LN2(x)).
void TransformerBlock::forward_parallel(Ctx& c, const Tensor& x, Tensor& out,
                                        const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = x.dim(0), B = x.dim(1), D = spec_.hidden;
  ln1_->forward(c.ln1, x, ensure(c.ln1_out, {Sl, B, D}, act(), device_));
  const Tensor& attn = attention_branch_forward(c, c.ln1_out, mb, key_mask);
  ops::add(x, attn, ensure(c.mid, {Sl, B, D}, act(), device_));
  ln2_->forward(c.ln2, x, ensure(c.ln2_out, {Sl, B, D}, act(), device_));
  const Tensor& mlp = mlp_branch_forward(c, c.ln2_out, mb);
  ops::add(c.mid, mlp, ensure(out, {Sl, B, D}, act(), device_));
}

void TransformerBlock::backward_parallel(Ctx& c, const Tensor& d_out, Tensor& dx,
                                         const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = d_out.dim(0), B = d_out.dim(1), D = spec_.hidden;
  // d_ln holds each branch's input gradient in turn; d_mid the LN1 path's share of dx.
  mlp_branch_backward(c, d_out, ensure(c.d_ln, {Sl, B, D}, act(), device_), mb);
  ln2_->backward(c.ln2, c.d_ln, dx);
  attention_branch_backward(c, d_out, c.d_ln, mb, key_mask);
  ln1_->backward(c.ln1, c.d_ln, ensure(c.d_mid, {Sl, B, D}, act(), device_));
  ops::add_inplace(dx, c.d_mid);
  ops::add_inplace(dx, d_out);  // residual
}

// Post-LN: the branches read the residual stream directly and the norms sit after each
// residual sum: h = LN1(x + attn(x)) (c.mid, c.ln1_out); out = LN2(h + mlp(h)) (c.sum2). With
// sequence parallelism the norms and sums run on [S/tp] slices exactly as in pre-LN.
void TransformerBlock::forward_post_norm(Ctx& c, const Tensor& x, Tensor& out,
                                         const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = x.dim(0), B = x.dim(1), D = spec_.hidden;
  const Tensor& attn = attention_branch_forward(c, x, mb, key_mask);
  ops::add(x, attn, ensure(c.mid, {Sl, B, D}, act(), device_));
  ln1_->forward(c.ln1, c.mid, ensure(c.ln1_out, {Sl, B, D}, act(), device_));
  const Tensor& mlp = mlp_branch_forward(c, c.ln1_out, mb);
  ops::add(c.ln1_out, mlp, ensure(c.sum2, {Sl, B, D}, act(), device_));
  ln2_->forward(c.ln2, c.sum2, ensure(out, {Sl, B, D}, act(), device_));
}

void TransformerBlock::backward_post_norm(Ctx& c, const Tensor& d_out, Tensor& dx,
                                          const MicroBatchInfo& mb, const uint8_t* key_mask) const {
  const int64_t Sl = d_out.dim(0), B = d_out.dim(1), D = spec_.hidden;
  // d_mid holds d(sum2), then d(mid); d_ln holds d(h).
  ln2_->backward(c.ln2, d_out, ensure(c.d_mid, {Sl, B, D}, act(), device_));
  mlp_branch_backward(c, c.d_mid, ensure(c.d_ln, {Sl, B, D}, act(), device_), mb);
  ops::add_inplace(c.d_ln, c.d_mid);  // residual into h
  ln1_->backward(c.ln1, c.d_ln, c.d_mid);
  attention_branch_backward(c, c.d_mid, dx, mb, key_mask);
  ops::add_inplace(dx, c.d_mid);  // residual into x
}

}  // namespace megatron
