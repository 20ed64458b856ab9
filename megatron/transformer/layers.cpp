#include "megatron/transformer/layers.h"

#include <algorithm>

#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron {

ShardSpec tp_shard(int dim, const parallel::Communicator& tp) {
  if (tp.size() == 1) return {};
  return ShardSpec{dim, ShardAxis::Tensor, tp.rank(), tp.size()};
}

Linear::Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias,
               TPMode mode, parallel::Communicator& tp, float init_std, Shape weight_shape,
               bool sequence_parallel, const LoraSpec& lora)
    : mode_(mode),
      tp_(&tp),
      local_in_(in),
      local_out_(out),
      sp_(sequence_parallel && tp.size() > 1 && mode != TPMode::None) {
  if (weight_shape.ndim() == 0) weight_shape = Shape{out, in};
  MT_CHECK(weight_shape.numel() == out * in, "Linear '", name, "': weight shape ",
           weight_shape.str(), " does not hold [", out, ", ", in, "]");
  const int p = tp.size();
  int shard_dim = -1;
  if (mode == TPMode::Column) {
    MT_CHECK(out % p == 0, "Linear '", name, "': output size ", out,
             " is not divisible by tensor parallel size ", p);
    local_out_ = out / p;
    shard_dim = weight_shape.ndim() == 2 ? 0 : weight_shape.ndim() - 2;  // [.., out_part, in]
  } else if (mode == TPMode::Row) {
    MT_CHECK(in % p == 0, "Linear '", name, "': input size ", in,
             " is not divisible by tensor parallel size ", p);
    local_in_ = in / p;
    shard_dim = weight_shape.ndim() - 1;
  }
  ShardSpec shard = shard_dim >= 0 ? tp_shard(shard_dim, tp) : ShardSpec{};
  weight_ =
      &store.add(name + ".weight", weight_shape, {ParamInit::Kind::Normal, init_std}, true, shard);
  if (bias) {
    // One bias per output row, laid out like the weight's rows (a stacked SwiGLU fc1 [2, F, D]
    // has a [2, F] bias), so a column split cuts both at the same rows.
    const Shape bias_shape(weight_shape.begin(), weight_shape.end() - 1);
    ShardSpec bias_shard =
        mode == TPMode::Column ? tp_shard(bias_shape.ndim() - 1, tp) : ShardSpec{};
    bias_ =
        &store.add(name + ".bias", bias_shape, {ParamInit::Kind::Zeros, 0.0f}, false, bias_shard);
  }
  if (lora.rank > 0)
    lora_ = std::make_unique<LoRAAdapter>(store, name, in, out, weight_shape, mode, tp, lora);
}

Linear::~Linear() = default;

void Linear::add_row_lora(Ctx& ctx, const Tensor& x, Tensor& y, const MicroBatchInfo* mb) const {
  Tensor full;
  lora_->forward_row(ctx.lora_h, x, full, mb, ctx.lora_x);
  const int64_t rows = y.numel() / local_out_;
  const int64_t first = sp_ ? rows * tp_->rank() : 0;  // this rank's sequence slice
  Tensor mine = full.flat_view(first * local_out_, {rows, local_out_});
  Tensor y2 = y.view({rows, local_out_});
  ops::add_inplace(y2, mine);
}

namespace tp = tensor_parallel;

void Linear::forward(Ctx& ctx, const Tensor& x, Tensor& y, const MicroBatchInfo* mb) const {
  const Tensor w = weight_2d(weight_->weight);
  const Tensor* bias = bias_ ? &bias_->weight : nullptr;
  ctx.input = x;
  if (mode_ == TPMode::Column) {
    // Entering the region. With sequence parallelism only the local slice is kept for backward
    // (which gathers it again): the memory saving of sequence parallelism.
    const Tensor in = sp_ ? tp::gathered_sequence(*tp_, x) : tp::copy_to_region_forward(x);
    ops::linear_forward(in, w, bias, y);
    if (lora_) lora_->forward_column(ctx.lora_h, in, y, mb, ctx.lora_x);
    return;
  }
  if (mode_ == TPMode::Row && tp_->size() > 1) {
    // Leaving the region: partial sums over the input shards, the bias added once after.
    if (sp_) {
      Tensor partial =
          Tensor::empty(tp::full_sequence_shape(y.shape(), *tp_), y.dtype(), y.device());
      ops::linear_forward(x, w, nullptr, partial);
      tp::reduce_scatter_to_sequence_forward(*tp_, partial, y);
    } else {
      ops::linear_forward(x, w, nullptr, y);
      tp::reduce_from_region_forward(*tp_, y);
    }
    if (lora_) add_row_lora(ctx, x, y, mb);
    if (bias_) ops::add_bias(y, bias_->weight);
    return;
  }
  ops::linear_forward(x, w, bias, y);
  if (lora_ && mode_ == TPMode::Row) add_row_lora(ctx, x, y, mb);
  if (lora_ && mode_ != TPMode::Row) lora_->forward_column(ctx.lora_h, x, y, mb, ctx.lora_x);
}

void Linear::backward(Ctx& ctx, const Tensor& dy, Tensor* dx, const MicroBatchInfo* mb,
                      bool dy_is_state) const {
  // B here; the weight and bias gradients go through weight_grads (now, or queued for W). The
  // gathered and reduce-scattered full-sequence tensors are this call's own: read in place.
  const WeightGradInputs own = WeightGradInputs::Stable, state = state_input(mb);
  const WeightGradInputs dy_state = dy_is_state ? state : WeightGradInputs::Copy;
  const Tensor w = weight_2d(weight_->weight);
  if (sp_ && mode_ == TPMode::Row) {
    // The output gradient arrives as sequence slices; the GEMMs need the full sequence. Using
    // the gathered gradient for the bias too makes its gradient complete on every rank.
    Tensor dy_full =
        Tensor::empty(tp::full_sequence_shape(dy.shape(), *tp_), dy.dtype(), dy.device());
    tp::reduce_scatter_to_sequence_backward(*tp_, dy, dy_full);
    ops::linear_backward(ctx.input, w, dy_full, dx, nullptr, nullptr);
    if (lora_)
      lora_->backward(ctx.lora_h, ctx.input, dy_full, dx, ctx.lora_scratch, mb, ctx.lora_x, state,
                      own);
    return weight_grads(ctx.input, dy_full, mb, state, own);
  }
  if (sp_ && mode_ == TPMode::Column) {
    const Tensor x_full = tp::gathered_sequence(*tp_, ctx.input);
    if (!dx) {
      if (lora_)
        lora_->backward(ctx.lora_h, x_full, dy, nullptr, ctx.lora_scratch, mb, ctx.lora_x, own,
                        dy_state);
      return weight_grads(x_full, dy, mb, own, dy_state);
    }
    // Full-sequence partial input gradient, summed over tp and split back into slices at once.
    Tensor partial = Tensor::empty(x_full.shape(), dy.dtype(), dy.device());
    ops::linear_backward(x_full, w, dy, &partial, nullptr, nullptr);
    if (lora_)
      lora_->backward(ctx.lora_h, x_full, dy, &partial, ctx.lora_scratch, mb, ctx.lora_x, own,
                      dy_state);
    tp::gather_from_sequence_backward(*tp_, partial, *dx);
    return weight_grads(x_full, dy, mb, own, dy_state);
  }
  const Tensor& dy_in = tp::reduce_from_region_backward(dy);
  if (dx) ops::linear_backward(ctx.input, w, dy_in, dx, nullptr, nullptr);
  if (lora_)
    lora_->backward(ctx.lora_h, ctx.input, dy, dx, ctx.lora_scratch, mb, ctx.lora_x, state,
                    dy_state);
  if (dx && mode_ == TPMode::Column) tp::copy_to_region_backward(*tp_, *dx);
  weight_grads(ctx.input, dy_in, mb, state, dy_state);
}

void Linear::weight_grads(const Tensor& x, const Tensor& dy, const MicroBatchInfo* mb,
                          WeightGradInputs x_kind, WeightGradInputs dy_kind) const {
  // A frozen weight (or bias) gets no gradient.
  const bool weight = !weight_->frozen, bias = bias_ && bias_->grad_or_null();
  if (!weight && !bias) return;
  run_weight_grads(mb, {x, dy},
                   [this, weight](const std::vector<Tensor>& in) {
                     Tensor dw_view = weight ? weight_2d(weight_->grad) : Tensor();
                     ops::linear_weight_grad(in[0], weight_->weight, in[1],
                                             weight ? &dw_view : nullptr,
                                             bias_ ? bias_->grad_or_null() : nullptr);
                   },
                   {x_kind, dy_kind});
}

void Linear::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(weight_);
  if (bias_) out.push_back(bias_);
  if (lora_) {
    out.push_back(&lora_->a());
    out.push_back(&lora_->b());
  }
}

void Norm::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(weight_);
  if (bias_) out.push_back(bias_);
}

Tensor& grad_or_scratch(Parameter& p, Tensor& scratch, Device device) {
  if (!p.frozen) return p.grad;
  ensure(scratch, p.weight.shape(), DType::F32, device);
  scratch.zero_();
  return scratch;
}

const Tensor& norm_gain(const Tensor& w, bool zero_centered, Tensor& gain, Tensor& ones) {
  if (!zero_centered) return w;
  ensure(ones, w.shape(), DType::F32, w.device());
  ensure(gain, w.shape(), DType::F32, w.device());
  ops::fill(ones, 1.0f);
  ops::cast(w, gain);
  ops::add_inplace(gain, ones);
  return gain;
}

Norm::Norm(ParamStore& store, const std::string& name, int64_t dim, Kind kind, float eps,
           bool sequence_parallel, bool zero_centered_gamma)
    : kind_(kind),
      eps_(eps),
      dim_(dim),
      zero_centered_(zero_centered_gamma),
      device_(store.device()) {
  const auto init = zero_centered_gamma ? ParamInit::Kind::Zeros : ParamInit::Kind::Ones;
  weight_ = &store.add(name + ".weight", Shape{dim}, {init, 0.0f}, false);
  weight_->tp_partial_grad = sequence_parallel;
  if (kind == Kind::LayerNorm) {
    bias_ = &store.add(name + ".bias", Shape{dim}, {ParamInit::Kind::Zeros, 0.0f}, false);
    bias_->tp_partial_grad = sequence_parallel;
  }
}

void Norm::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  ctx.input = x;
  const Shape rows{x.numel() / dim_};
  ensure(ctx.rstd, rows, DType::F32, device_);
  const Tensor& w = norm_gain(weight_->weight, zero_centered_, ctx.gain, ctx.ones);
  if (kind_ == Kind::LayerNorm) {
    ensure(ctx.mean, rows, DType::F32, device_);
    ops::layernorm_forward(x, w, bias_->weight, eps_, y, ctx.mean, ctx.rstd);
  } else {
    ops::rmsnorm_forward(x, w, eps_, y, ctx.rstd);
  }
}

void Norm::backward(Ctx& ctx, const Tensor& dy, Tensor& dx) const {
  Tensor& dw = grad_or_scratch(*weight_, ctx.frozen_dw, device_);
  // (The forward's gain: the weights do not change between forward and backward.)
  const Tensor& w = zero_centered_ ? ctx.gain : weight_->weight;
  if (kind_ == Kind::LayerNorm)
    ops::layernorm_backward(ctx.input, w, ctx.mean, ctx.rstd, dy, dx, dw,
                            grad_or_scratch(*bias_, ctx.frozen_db, device_));
  else
    ops::rmsnorm_backward(ctx.input, w, ctx.rstd, dy, dx, dw);
}

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t dim,
                     parallel::Communicator& tp, float init_std, bool sequence_parallel,
                     bool share_existing)
    : tp_(&tp), sp_(sequence_parallel && tp.size() > 1), device_(store.device()) {
  MT_CHECK(vocab % tp.size() == 0, "embedding '", name, "': vocabulary ", vocab,
           " is not divisible by tensor parallel size ", tp.size());
  local_vocab_ = vocab / tp.size();
  vocab_start_ = local_vocab_ * tp.rank();
  if (share_existing && (table_ = store.find(name + ".weight")) != nullptr) return;
  table_ = &store.add(name + ".weight", Shape{vocab, dim}, {ParamInit::Kind::Normal, init_std},
                      true, tp_shard(0, tp));
}

void Embedding::forward(Ctx& ctx, const Tensor& ids, Tensor& out) const {
  ctx.ids = ids;
  // Each rank produces only the rows of its vocabulary slice; leaving the region sums them.
  if (sp_) {
    ensure(scratch_, tp::full_sequence_shape(out.shape(), *tp_), out.dtype(), device_);
    ops::embedding_forward(ids, table_->weight, vocab_start_, scratch_);
    tp::reduce_scatter_to_sequence_forward(*tp_, scratch_, out);
    return;
  }
  ops::embedding_forward(ids, table_->weight, vocab_start_, out);
  tp::reduce_from_region_forward(*tp_, out);
}

void Embedding::backward(Ctx& ctx, const Tensor& dout, const MicroBatchInfo* mb) const {
  if (table_->frozen) return;  // nothing flows further back than the table
  // All of it is weight gradient: the collective in B, the scatter-add through weight_grads.
  const auto scatter_add = [this](const std::vector<Tensor>& in) {
    ops::embedding_backward(in[0], in[1], vocab_start_, table_->grad);
  };
  if (sp_) {
    ensure(scratch_, tp::full_sequence_shape(dout.shape(), *tp_), dout.dtype(), device_);
    tp::reduce_scatter_to_sequence_backward(*tp_, dout, scratch_);
    return run_weight_grads(mb, {ctx.ids, scratch_}, scatter_add);
  }
  run_weight_grads(mb, {ctx.ids, tp::reduce_from_region_backward(dout)}, scatter_add);
}

namespace {

kernels::DropoutRows rows_of(const Tensor& t, const ActivationSlice& slice) {
  MT_CHECK(t.ndim() >= 2, "dropout over [S, B, D] activations got ", t.shape().str());
  kernels::DropoutRows r;
  r.S = t.dim(0);
  r.B = t.dim(1);
  r.D = t.numel() / std::max<int64_t>(r.S * r.B, 1);
  r.batch_offset = slice.batch_offset;
  r.seq_offset = slice.seq_offset;
  r.seq_total = slice.seq_total > 0 ? slice.seq_total : r.S;
  r.chunks = slice.chunks;
  return r;
}

}  // namespace

ActivationSlice activation_slice(const MicroBatchInfo& mb, int64_t local_seq,
                                 const parallel::Communicator& tp, bool sequence_parallel) {
  const bool split = sequence_parallel && tp.size() > 1;
  const int64_t rows = split ? local_seq * tp.size() : local_seq;  // this rank's sequence
  return ActivationSlice{mb.batch_offset, split ? tp.rank() * local_seq : 0,
                         mb.cp.active() ? mb.cp.total : rows, mb.cp};
}

void dropout_sbd_forward(const Tensor& x, Tensor& y, float p, const DropoutSite& site,
                         const ActivationSlice& slice) {
  ops::dropout_rows(x, y, rows_of(x, slice), p, site.seed, site.stream());
}

void dropout_sbd_backward(const Tensor& dy, Tensor& dx, float p, const DropoutSite& site,
                          const ActivationSlice& slice) {
  ops::dropout_rows(dy, dx, rows_of(dy, slice), p, site.seed, site.stream());
}

}  // namespace megatron
