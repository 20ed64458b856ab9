#include "megatron/transformer/qk_norm.h"

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/layers.h"

namespace megatron {

QkNorm::QkNorm(ParamStore& store, const std::string& prefix, int64_t head_dim,
               int64_t heads_per_group, float eps, int64_t tp_size)
    : head_dim_(head_dim), heads_per_group_(heads_per_group), eps_(eps), device_(store.device()) {
  const ParamInit ones{ParamInit::Kind::Ones, 0.0f};
  q_ = &store.add(prefix + ".attention.q_norm.weight", Shape{head_dim}, ones, false);
  k_ = &store.add(prefix + ".attention.k_norm.weight", Shape{head_dim}, ones, false);
  q_->tp_partial_grad = k_->tp_partial_grad = tp_size > 1;
}

void QkNorm::forward(Ctx& ctx, const Tensor& x, Tensor& y) const {
  const int64_t rows = x.numel() / head_dim_ / (heads_per_group_ + 2);
  ops::qk_rmsnorm_forward(x, q_->weight, k_->weight, eps_, heads_per_group_, y,
                          ensure(ctx.rstd, {rows, heads_per_group_ + 1}, DType::F32, device_));
}

void QkNorm::backward(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) const {
  ops::qk_rmsnorm_backward(x, q_->weight, k_->weight, ctx.rstd, dy, heads_per_group_, dx,
                           grad_or_scratch(*q_, ctx.frozen_dwq, device_),
                           grad_or_scratch(*k_, ctx.frozen_dwk, device_));
}

void QkNorm::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(q_);
  out.push_back(k_);
}

}  // namespace megatron
