#include "megatron/transformer/moe/shared_expert.h"

#include <cmath>

#include "megatron/backend/ops.h"
#include "megatron/transformer/moe/host_collectives.h"

namespace megatron::moe {

SharedExpert::SharedExpert(const SubmoduleArgs& a, int64_t ffn, bool gated, bool sp)
    : mlp_(std::make_unique<DenseMLP>(a, a.prefix + ".mlp.shared_experts", ffn)),
      act_(a.spec.activation_dtype),
      device_(a.store.device()) {
  if (!gated) return;
  gate_ = &a.store.add(a.prefix + ".mlp.shared_experts.gate_weight", Shape{1, a.spec.hidden},
                       {ParamInit::Kind::Normal, a.spec.init_std}, true);
  gate_->tp_partial_grad = sp;
}

void SharedExpert::collect_params(std::vector<Parameter*>& out) const {
  mlp_->collect_params(out);
  if (gate_) out.push_back(gate_);
}

const Tensor& SharedExpert::forward(State& s, const Tensor& x, const Tensor& x32,
                                    const MicroBatchInfo& mb) const {
  if (!s.mlp) s.mlp = mlp_->make_state();
  s.mlp_out = mlp_->forward(*s.mlp, x, mb);
  if (!gate_) return s.mlp_out;
  const int64_t Tl = x32.dim(0), D = x32.dim(1);
  ensure(s.w32, {1, D}, DType::F32, device_);
  ops::cast(gate_->weight, s.w32);
  ensure(s.logits, {Tl, 1}, DType::F32, device_);
  ops::linear_forward(x32, s.w32, nullptr, s.logits);
  const Tensor logits = s.logits.to(Device::CPU);
  const float* z = logits.data<float>();
  s.gate_host.resize(static_cast<size_t>(Tl));
  for (int64_t t = 0; t < Tl; ++t) s.gate_host[size_t(t)] = 1.0f / (1.0f + std::exp(-z[t]));
  s.gate = host_vector_on(s.gate_host, DType::F32, device_);
  ensure(s.out, x.shape(), act_, device_);
  Tensor out = s.out.view({Tl, D});
  ops::moe_combine(s.mlp_out.view({Tl, D}), nullptr, &s.gate, 1, out);
  return s.out;
}

const Tensor& SharedExpert::backward(State& s, const Tensor& d_out, const Tensor& x32, Tensor& dx32,
                                     const MicroBatchInfo& mb) const {
  ensure(s.d_in, d_out.shape(), act_, device_);
  if (!gate_) {
    mlp_->backward(*s.mlp, d_out, s.d_in, mb);
    return s.d_in;
  }
  const int64_t Tl = x32.dim(0), D = x32.dim(1);
  // out = g * y: dy_mlp = g * d_out, dg = d_out . y, dz = dg g (1 - g).
  ensure(s.d_mlp_out, d_out.shape(), act_, device_);
  ensure(s.d_gate, {Tl}, DType::F32, device_);
  Tensor d_mlp = s.d_mlp_out.view({Tl, D});
  ops::moe_combine_backward(s.mlp_out.view({Tl, D}), s.gate, d_out.view({Tl, D}), 1, d_mlp,
                            s.d_gate);
  const Tensor d_gate = s.d_gate.to(Device::CPU);
  s.dlogit_host.resize(static_cast<size_t>(Tl));
  for (int64_t t = 0; t < Tl; ++t) {
    const float g = s.gate_host[size_t(t)];
    s.dlogit_host[size_t(t)] = d_gate.data<float>()[t] * g * (1.0f - g);
  }
  s.dlogit = host_vector_on(s.dlogit_host, DType::F32, device_).view({Tl, 1});
  ensure(s.dx_gate, {Tl, D}, DType::F32, device_);
  ops::linear_backward(x32, s.w32, s.dlogit, &s.dx_gate, &gate_->grad, nullptr);
  ops::add_inplace(dx32, s.dx_gate);
  mlp_->backward(*s.mlp, s.d_mlp_out, s.d_in, mb);
  return s.d_in;
}

}  // namespace megatron::moe
