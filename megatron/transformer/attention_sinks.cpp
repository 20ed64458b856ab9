#include "megatron/transformer/attention_sinks.h"

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/layers.h"

namespace megatron {

AttentionSinks::AttentionSinks(ParamStore& store, const std::string& prefix, int64_t heads,
                               bool learned, float init_std, parallel::Communicator& tp)
    : device_(store.device()) {
  MT_CHECK(heads % tp.size() == 0, "attention sinks: ", heads, " heads over tp ", tp.size());
  if (learned) {
    param_ = &store.add(prefix + ".attention.softmax_offset", Shape{heads},
                        ParamInit{ParamInit::Kind::Normal, init_std}, false, tp_shard(0, tp));
    return;
  }
  fixed_ = Tensor::zeros(Shape{heads / tp.size()}, DType::F32, device_);
}

void AttentionSinks::collect_params(std::vector<Parameter*>& out) const {
  if (param_) out.push_back(param_);
}

const Tensor& AttentionSinks::logits(Tensor& scratch) const {
  if (!param_) return fixed_;
  if (param_->weight.dtype() == DType::F32) return param_->weight;
  ops::cast(param_->weight, ensure(scratch, param_->weight.shape(), DType::F32, device_));
  return scratch;
}

void AttentionSinks::forward(const kernels::AttentionShape& as, const Tensor& lse, Tensor& scratch,
                             Tensor& out) const {
  ops::attention_sinks_forward(as, logits(scratch), lse, out);
}

void AttentionSinks::backward(const kernels::AttentionShape& as, const Tensor& lse,
                              const Tensor& out, const Tensor& d_out, Tensor& scratch,
                              Tensor& d_scaled) const {
  Tensor* grad = param_ != nullptr ? param_->grad_or_null() : nullptr;
  ops::attention_sinks_backward(as, logits(scratch), lse, out, d_out, d_scaled, grad);
}

}  // namespace megatron
