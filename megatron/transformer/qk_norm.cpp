#include "megatron/transformer/qk_norm.h"

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/layers.h"

namespace megatron {

QkNorm::QkNorm(ParamStore& store, const std::string& prefix, Span span, int64_t heads,
               int64_t query_groups, int64_t head_dim, float eps, parallel::Communicator& tp,
               bool zero_centered_gamma)
    : span_(span),
      heads_(heads),
      groups_(query_groups),
      head_dim_(head_dim),
      eps_(eps),
      zero_centered_(zero_centered_gamma),
      tp_(&tp),
      device_(store.device()) {
  const ParamInit ones{zero_centered_gamma ? ParamInit::Kind::Zeros : ParamInit::Kind::Ones, 0.0f};
  const std::string q = prefix + ".attention.q_norm.weight",
                    k = prefix + ".attention.k_norm.weight";
  if (span == Span::Head) {
    q_ = &store.add(q, Shape{head_dim}, ones, false);
    k_ = &store.add(k, Shape{head_dim}, ones, false);
    q_->tp_partial_grad = k_->tp_partial_grad = tp.size() > 1;
    return;
  }
  // Split with the heads: a rank's query heads (and key groups) are consecutive.
  q_ = &store.add(q, Shape{heads * head_dim}, ones, false, tp_shard(0, tp));
  k_ = &store.add(k, Shape{query_groups * head_dim}, ones, false, tp_shard(0, tp));
}

kernels::QkProjection QkNorm::projection(const Tensor& x) const {
  const int64_t groups = groups_ / tp_->size(), q_slots = heads_ / groups_;
  const int64_t row = groups * (q_slots + 2) * head_dim_;
  return kernels::QkProjection{x.numel() / row,     groups, q_slots, head_dim_, heads_ * head_dim_,
                               groups_ * head_dim_, eps_};
}

// The gains the norms scale by: the weights, or with zero-centered gamma 1 + weight, computed
// once per forward into the context (backward reads the forward's: the weights do not change
// between them).
QkNorm::Gains QkNorm::forward_gains(Ctx& ctx) const {
  return {norm_gain(q_->weight, zero_centered_, ctx.gain_q, ctx.ones),
          norm_gain(k_->weight, zero_centered_, ctx.gain_k, ctx.ones)};
}
QkNorm::Gains QkNorm::backward_gains(const Ctx& ctx) const {
  return zero_centered_ ? Gains{ctx.gain_q, ctx.gain_k} : Gains{q_->weight, k_->weight};
}

// The per-token sums of x^2 (dy null) or dy w x over the whole projections: this rank's part,
// all-reduced over tp.
Tensor& QkNorm::statistics(Ctx& ctx, const Gains& g, const Tensor& x, const Tensor* dy) const {
  const kernels::QkProjection p = projection(x);
  Tensor& sums = ensure(ctx.sums, {p.tokens, 2}, DType::F32, device_);
  ops::qk_projection_sums(x, dy, g.q, g.k, p, sums);
  if (tp_->size() > 1) tp_->all_reduce(sums, parallel::ReduceOp::Sum);
  return sums;
}

void QkNorm::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  const Gains g = forward_gains(ctx);
  if (span_ == Span::Projection) {
    const kernels::QkProjection p = projection(x);
    const Tensor& sums = statistics(ctx, g, x, nullptr);
    ops::qk_projection_norm_forward(x, g.q, g.k, sums, p, y,
                                    ensure(ctx.rstd, {p.tokens, 2}, DType::F32, device_));
    return;
  }
  const int64_t q_slots = heads_ / groups_;
  const int64_t rows = x.numel() / head_dim_ / (q_slots + 2);
  ops::qk_rmsnorm_forward(x, g.q, g.k, eps_, q_slots, y,
                          ensure(ctx.rstd, {rows, q_slots + 1}, DType::F32, device_));
}

void QkNorm::backward(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) const {
  Tensor& dwq = grad_or_scratch(*q_, ctx.frozen_dwq, device_);
  Tensor& dwk = grad_or_scratch(*k_, ctx.frozen_dwk, device_);
  const Gains g = backward_gains(ctx);
  if (span_ == Span::Projection) {
    const Tensor& dots = statistics(ctx, g, x, &dy);
    ops::qk_projection_norm_backward(x, g.q, g.k, ctx.rstd, dots, dy, projection(x), dx, dwq, dwk);
    return;
  }
  ops::qk_rmsnorm_backward(x, g.q, g.k, ctx.rstd, dy, heads_ / groups_, dx, dwq, dwk);
}

void QkNorm::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(q_);
  out.push_back(k_);
}

}  // namespace megatron
