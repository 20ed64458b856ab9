#include "megatron/transformer/mlp.h"

#include "megatron/backend/ops.h"

namespace megatron {

DenseMLP::DenseMLP(const SubmoduleArgs& a) : DenseMLP(a, a.prefix + ".mlp", a.spec.ffn) {}

DenseMLP::DenseMLP(const SubmoduleArgs& a, const std::string& name, int64_t ffn)
    : spec_(a.spec),
      device_(a.store.device()),
      tp_(&a.tp),
      sp_(a.spec.sequence_parallel && a.tp.size() > 1) {
  spec_.ffn = ffn;
  const int64_t D = spec_.hidden;
  const int64_t fc1_out = spec_.swiglu ? 2 * spec_.ffn : spec_.ffn;
  const Shape fc1_shape = spec_.swiglu ? Shape{2, spec_.ffn, D} : Shape{};
  fc1_ = std::make_unique<Linear>(a.store, name + ".fc1", D, fc1_out, spec_.bias, TPMode::Column,
                                  a.tp, spec_.init_std, fc1_shape, sp_,
                                  spec_.lora_for(spec_.lora_fc1, a.layer, 2));
  fc2_ = std::make_unique<Linear>(a.store, name + ".fc2", spec_.ffn, D, spec_.bias, TPMode::Row,
                                  a.tp, spec_.output_init_std(), Shape{}, sp_,
                                  spec_.lora_for(spec_.lora_fc2, a.layer, 3));
}

void DenseMLP::collect_params(std::vector<Parameter*>& out) const {
  fc1_->collect_params(out);
  fc2_->collect_params(out);
}

Tensor& DenseMLP::forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb) const {
  State& s = static_cast<State&>(state);
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden;
  const int64_t S = sp_ ? Sl * tp_->size() : Sl;
  fc1_->forward(s.fc1, in, ensure(s.fc1_out, {S, B, fc1_->local_out()}, act(), device_), &mb);
  ensure(s.act_out, {S, B, fc2_->local_in()}, act(), device_);
  if (spec_.swiglu)
    ops::glu_forward(s.fc1_out, s.act_out, spec_.glu());
  else
    ops::gelu_forward(s.fc1_out, s.act_out, spec_.gelu);
  fc2_->forward(s.fc2, s.act_out, ensure(s.out, {Sl, B, D}, act(), device_), &mb);
  return s.out;
}

void DenseMLP::backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                        const MicroBatchInfo& mb) const {
  State& s = static_cast<State&>(state);
  fc2_->backward(s.fc2, d_out, &ensure(s.d_act, s.act_out.shape(), act(), device_), &mb);
  ensure(s.d_fc1, s.fc1_out.shape(), act(), device_);
  if (spec_.swiglu)
    ops::glu_backward(s.fc1_out, s.d_act, s.d_fc1, spec_.glu());
  else
    ops::gelu_backward(s.fc1_out, s.d_act, s.d_fc1, spec_.gelu);
  fc1_->backward(s.fc1, s.d_fc1, &d_in, &mb, /*dy_is_state=*/true);
}

}  // namespace megatron
