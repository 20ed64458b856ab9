#include "megatron/transformer/layers.h"

#include "megatron/backend/ops.h"

namespace megatron {

namespace {
ShardSpec tp_shard(int dim, const parallel::Communicator& tp) {
  if (tp.size() == 1) return {};
  return ShardSpec{dim, ShardAxis::Tensor, tp.rank(), tp.size()};
}
}  // namespace

Linear::Linear(ParamStore& store, const std::string& name, int64_t in, int64_t out, bool bias,
               TPMode mode, parallel::Communicator& tp, float init_std, Shape weight_shape)
    : mode_(mode), tp_(&tp), local_in_(in), local_out_(out) {
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
  weight_ = &store.add(name + ".weight", weight_shape, {ParamInit::Kind::Normal, init_std}, true,
                       shard);
  if (bias) {
    ShardSpec bias_shard = mode == TPMode::Column ? tp_shard(0, tp) : ShardSpec{};
    bias_ = &store.add(name + ".bias", Shape{out}, {ParamInit::Kind::Zeros, 0.0f}, false,
                       bias_shard);
  }
}

void Linear::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  ctx.input = x;
  const Tensor w = weight_2d(weight_->value);
  if (mode_ == TPMode::Row && tp_->size() > 1) {
    ops::linear_forward(x, w, nullptr, y);
    tp_->all_reduce(y, parallel::ReduceOp::Sum);
    if (bias_) ops::add_bias(y, bias_->value);
  } else {
    ops::linear_forward(x, w, bias_ ? &bias_->value : nullptr, y);
  }
}

void Linear::backward(Ctx& ctx, const Tensor& dy, Tensor* dx) const {
  Tensor dw = weight_2d(weight_->grad);
  ops::linear_backward(ctx.input, weight_2d(weight_->value), dy, dx, dw,
                       bias_ ? &bias_->grad : nullptr);
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

Norm::Norm(ParamStore& store, const std::string& name, int64_t dim, Kind kind, float eps)
    : kind_(kind), eps_(eps), dim_(dim) {
  weight_ = &store.add(name + ".weight", Shape{dim}, {ParamInit::Kind::Ones, 0.0f}, false);
  if (kind == Kind::LayerNorm)
    bias_ = &store.add(name + ".bias", Shape{dim}, {ParamInit::Kind::Zeros, 0.0f}, false);
}

void Norm::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  ctx.input = x;
  const Shape rows{x.numel() / dim_};
  ensure(ctx.rstd, rows);
  if (kind_ == Kind::LayerNorm) {
    ensure(ctx.mean, rows);
    ops::layernorm_forward(x, weight_->value, bias_->value, eps_, y, ctx.mean, ctx.rstd);
  } else {
    ops::rmsnorm_forward(x, weight_->value, eps_, y, ctx.rstd);
  }
}

void Norm::backward(Ctx& ctx, const Tensor& dy, Tensor& dx) const {
  if (kind_ == Kind::LayerNorm) {
    ops::layernorm_backward(ctx.input, weight_->value, ctx.mean, ctx.rstd, dy, dx, weight_->grad,
                            bias_->grad);
  } else {
    ops::rmsnorm_backward(ctx.input, weight_->value, ctx.rstd, dy, dx, weight_->grad);
  }
}

Embedding::Embedding(ParamStore& store, const std::string& name, int64_t vocab, int64_t dim,
                     parallel::Communicator& tp, float init_std)
    : tp_(&tp) {
  MT_CHECK(vocab % tp.size() == 0, "embedding '", name, "': vocabulary ", vocab,
           " is not divisible by tensor parallel size ", tp.size());
  local_vocab_ = vocab / tp.size();
  vocab_start_ = local_vocab_ * tp.rank();
  table_ = &store.add(name + ".weight", Shape{vocab, dim}, {ParamInit::Kind::Normal, init_std},
                      true, tp_shard(0, tp));
}

void Embedding::forward(Ctx& ctx, const Tensor& ids, Tensor& out) const {
  ctx.ids = ids;
  ops::embedding_forward(ids, table_->value, vocab_start_, out);
  // Each rank produced only the rows of its vocabulary slice.
  if (tp_->size() > 1) tp_->all_reduce(out, parallel::ReduceOp::Sum);
}

void Embedding::backward(Ctx& ctx, const Tensor& dout) const {
  ops::embedding_backward(ctx.ids, dout, vocab_start_, table_->grad);
}

void dropout_sbd_forward(const Tensor& x, Tensor& y, float p, const DropoutSite& site,
                         int64_t batch_offset) {
  const int64_t S = x.dim(0), B = x.dim(1), D = x.numel() / (S * B);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = (s * B + b) * D;
      Tensor xr = x.flat_view(row, {D});
      Tensor yr = y.flat_view(row, {D});
      ops::dropout_forward(xr, yr, p, site.seed, site.stream(),
                           static_cast<uint64_t>(((batch_offset + b) * S + s) * D));
    }
}

void dropout_sbd_backward(const Tensor& dy, Tensor& dx, float p, const DropoutSite& site,
                          int64_t batch_offset) {
  const int64_t S = dy.dim(0), B = dy.dim(1), D = dy.numel() / (S * B);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = (s * B + b) * D;
      Tensor dyr = dy.flat_view(row, {D});
      Tensor dxr = dx.flat_view(row, {D});
      ops::dropout_backward(dyr, dxr, p, site.seed, site.stream(),
                            static_cast<uint64_t>(((batch_offset + b) * S + s) * D));
    }
}

}  // namespace megatron
