#include "megatron/transformer/layers.h"

#include <algorithm>

#include "megatron/backend/ops.h"

namespace megatron {

namespace {
ShardSpec tp_shard(int dim, const parallel::Communicator& tp) {
  if (tp.size() == 1) return {};
  return ShardSpec{dim, ShardAxis::Tensor, tp.rank(), tp.size()};
}
}  // namespace

Linear::Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias,
               TPMode mode, parallel::Communicator& tp, float init_std, Shape weight_shape,
               bool sequence_parallel)
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
    ShardSpec bias_shard = mode == TPMode::Column ? tp_shard(0, tp) : ShardSpec{};
    bias_ =
        &store.add(name + ".bias", Shape{out}, {ParamInit::Kind::Zeros, 0.0f}, false, bias_shard);
  }
}

namespace {

// [S_local, ...] -> [S_local * tp, ...]: the sequence dim is the outermost.
Shape full_sequence(const Shape& local, int64_t tp) {
  Shape s = local;
  s[0] = local[0] * tp;
  return s;
}

}  // namespace

void Linear::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  const Tensor w = weight_2d(weight_->weight);
  ctx.input = x;
  if (sp_ && mode_ == TPMode::Column) {
    // Only the local slice is kept for backward (which gathers it again): the memory saving
    // of sequence parallelism. The gathered copy is transient.
    Tensor gathered = Tensor::empty(full_sequence(x.shape(), tp_->size()), x.dtype(), x.device());
    tp_->all_gather(x, gathered);
    ops::linear_forward(gathered, w, bias_ ? &bias_->weight : nullptr, y);
    return;
  }
  if (mode_ == TPMode::Row && tp_->size() > 1) {
    if (sp_) {
      Tensor partial = Tensor::empty(full_sequence(y.shape(), tp_->size()), y.dtype(), y.device());
      ops::linear_forward(x, w, nullptr, partial);
      tp_->reduce_scatter(partial, y, parallel::ReduceOp::Sum);
    } else {
      ops::linear_forward(x, w, nullptr, y);
      tp_->all_reduce(y, parallel::ReduceOp::Sum);
    }
    if (bias_) ops::add_bias(y, bias_->weight);
  } else {
    ops::linear_forward(x, w, bias_ ? &bias_->weight : nullptr, y);
  }
}

void Linear::backward(Ctx& ctx, const Tensor& dy, Tensor* dx) const {
  Tensor dw = weight_2d(weight_->grad);
  const Tensor w = weight_2d(weight_->weight);
  if (sp_ && mode_ == TPMode::Row) {
    // The output gradient arrives as sequence slices; the GEMMs need the full sequence. Using
    // the gathered gradient for the bias too makes its gradient complete on every rank.
    Tensor dy_full = Tensor::empty(full_sequence(dy.shape(), tp_->size()), dy.dtype(), dy.device());
    tp_->all_gather(dy, dy_full);
    ops::linear_backward(ctx.input, w, dy_full, dx, dw, bias_ ? &bias_->grad : nullptr);
    return;
  }
  if (sp_ && mode_ == TPMode::Column) {
    const Tensor& x = ctx.input;
    Tensor x_full = Tensor::empty(full_sequence(x.shape(), tp_->size()), x.dtype(), x.device());
    tp_->all_gather(ctx.input, x_full);
    if (!dx) {
      ops::linear_backward(x_full, w, dy, nullptr, dw, bias_ ? &bias_->grad : nullptr);
      return;
    }
    // Full-sequence partial input gradient, summed over tp and split back into slices at once.
    Tensor partial = Tensor::empty(x_full.shape(), dy.dtype(), dy.device());
    ops::linear_backward(x_full, w, dy, &partial, dw, bias_ ? &bias_->grad : nullptr);
    tp_->reduce_scatter(partial, *dx, parallel::ReduceOp::Sum);
    return;
  }
  ops::linear_backward(ctx.input, w, dy, dx, dw, bias_ ? &bias_->grad : nullptr);
  if (dx && mode_ == TPMode::Column && tp_->size() > 1)
    tp_->all_reduce(*dx, parallel::ReduceOp::Sum);
}

void Linear::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(weight_);
  if (bias_) out.push_back(bias_);
}

void Norm::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(weight_);
  if (bias_) out.push_back(bias_);
}

Norm::Norm(ParamStore& store, const std::string& name, int64_t dim, Kind kind, float eps,
           bool sequence_parallel)
    : kind_(kind), eps_(eps), dim_(dim) {
  weight_ = &store.add(name + ".weight", Shape{dim}, {ParamInit::Kind::Ones, 0.0f}, false);
  weight_->tp_partial_grad = sequence_parallel;
  if (kind == Kind::LayerNorm) {
    bias_ = &store.add(name + ".bias", Shape{dim}, {ParamInit::Kind::Zeros, 0.0f}, false);
    bias_->tp_partial_grad = sequence_parallel;
  }
}

void Norm::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  ctx.input = x;
  const Shape rows{x.numel() / dim_};
  ensure(ctx.rstd, rows);
  if (kind_ == Kind::LayerNorm) {
    ensure(ctx.mean, rows);
    ops::layernorm_forward(x, weight_->weight, bias_->weight, eps_, y, ctx.mean, ctx.rstd);
  } else {
    ops::rmsnorm_forward(x, weight_->weight, eps_, y, ctx.rstd);
  }
}

void Norm::backward(Ctx& ctx, const Tensor& dy, Tensor& dx) const {
  if (kind_ == Kind::LayerNorm) {
    ops::layernorm_backward(ctx.input, weight_->weight, ctx.mean, ctx.rstd, dy, dx, weight_->grad,
                            bias_->grad);
  } else {
    ops::rmsnorm_backward(ctx.input, weight_->weight, ctx.rstd, dy, dx, weight_->grad);
  }
}

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t dim,
                     parallel::Communicator& tp, float init_std, bool sequence_parallel)
    : tp_(&tp), sp_(sequence_parallel && tp.size() > 1) {
  MT_CHECK(vocab % tp.size() == 0, "embedding '", name, "': vocabulary ", vocab,
           " is not divisible by tensor parallel size ", tp.size());
  local_vocab_ = vocab / tp.size();
  vocab_start_ = local_vocab_ * tp.rank();
  table_ = &store.add(name + ".weight", Shape{vocab, dim}, {ParamInit::Kind::Normal, init_std},
                      true, tp_shard(0, tp));
}

void Embedding::forward(Ctx& ctx, const Tensor& ids, Tensor& out) const {
  ctx.ids = ids;
  // Each rank produces only the rows of its vocabulary slice; the sum completes them.
  if (sp_) {
    ensure(scratch_, full_sequence(out.shape(), tp_->size()), out.dtype());
    ops::embedding_forward(ids, table_->weight, vocab_start_, scratch_);
    tp_->reduce_scatter(scratch_, out, parallel::ReduceOp::Sum);
    return;
  }
  ops::embedding_forward(ids, table_->weight, vocab_start_, out);
  if (tp_->size() > 1) tp_->all_reduce(out, parallel::ReduceOp::Sum);
}

void Embedding::backward(Ctx& ctx, const Tensor& dout) const {
  if (sp_) {
    ensure(scratch_, full_sequence(dout.shape(), tp_->size()), dout.dtype());
    tp_->all_gather(dout, scratch_);
    ops::embedding_backward(ctx.ids, scratch_, vocab_start_, table_->grad);
    return;
  }
  ops::embedding_backward(ctx.ids, dout, vocab_start_, table_->grad);
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
  return r;
}

}  // namespace

ActivationSlice activation_slice(int64_t batch_offset, int64_t local_seq,
                                 const parallel::Communicator& tp, bool sequence_parallel) {
  if (!sequence_parallel || tp.size() == 1) return ActivationSlice{batch_offset, 0, local_seq};
  return ActivationSlice{batch_offset, tp.rank() * local_seq, local_seq * tp.size()};
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
