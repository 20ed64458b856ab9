#include "megatron/transformer/moe/experts.h"

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron::moe {

namespace {
// A bias (or its gradient) as the flat [n] the linear ops take; empty without one.
Tensor bias_view(const Parameter* p, int64_t n) { return p ? p->weight.view({n}) : Tensor(); }
Tensor grad_view(Parameter* p, int64_t n) { return p ? p->grad.view({n}) : Tensor(); }
}  // namespace

GroupedExperts::GroupedExperts(ParamStore& store, const std::string& prefix, int64_t first_expert,
                               int64_t num_local, int64_t hidden, int64_t ffn, bool swiglu,
                               parallel::Communicator& tp, float init_std, float output_init_std,
                               math::Gelu gelu, math::Glu glu, bool bias)
    : adds_fc2_bias_(bias && tp.rank() == 0),
      hidden_(hidden),
      swiglu_(swiglu),
      gelu_(gelu),
      glu_(glu),
      device_(store.device()) {
  const int64_t p = tp.size();
  MT_CHECK(ffn % p == 0, "experts '", prefix, "': ffn ", ffn,
           " is not divisible by tensor parallel size ", p);
  local_ffn_ = ffn / p;
  auto shard = [&](int dim) {
    return p == 1 ? ShardSpec{} : ShardSpec{dim, ShardAxis::Tensor, tp.rank(), p};
  };
  for (int64_t j = 0; j < num_local; ++j) {
    const std::string name = prefix + ".mlp.experts." + std::to_string(first_expert + j);
    // SwiGLU: [2, F, D] so every shard holds its part of both the gate and the up projection.
    const Shape fc1_shape = swiglu ? Shape{2, ffn, hidden} : Shape{ffn, hidden};
    Parameter& fc1 = store.add(name + ".fc1.weight", fc1_shape, {ParamInit::Kind::Normal, init_std},
                               true, shard(swiglu ? 1 : 0));
    Parameter& fc2 = store.add(name + ".fc2.weight", Shape{hidden, ffn},
                               {ParamInit::Kind::Normal, output_init_std}, true, shard(1));
    fc1.expert = fc2.expert = true;
    experts_.push_back({&fc1, &fc2});
    if (!bias) continue;
    const Shape b1_shape = swiglu ? Shape{2, ffn} : Shape{ffn};
    Expert& e = experts_.back();
    e.fc1_bias = &store.add(name + ".fc1.bias", b1_shape, {ParamInit::Kind::Zeros, 0.0f}, false,
                            shard(swiglu ? 1 : 0));
    e.fc2_bias =
        &store.add(name + ".fc2.bias", Shape{hidden}, {ParamInit::Kind::Zeros, 0.0f}, false);
    e.fc1_bias->expert = e.fc2_bias->expert = true;
  }
}

void GroupedExperts::collect_params(std::vector<Parameter*>& out) const {
  for (const Expert& e : experts_) {
    out.push_back(e.fc1);
    if (e.fc1_bias) out.push_back(e.fc1_bias);
    out.push_back(e.fc2);
    if (e.fc2_bias) out.push_back(e.fc2_bias);
  }
}

void GroupedExperts::forward(State& s, const Tensor& rows,
                             const std::vector<int64_t>& rows_per_expert, Tensor& out) const {
  MT_CHECK(rows_per_expert.size() == experts_.size(), "experts: ", rows_per_expert.size(),
           " row counts for ", experts_.size(), " experts");
  const int64_t D = hidden_, F = local_ffn_, F1 = swiglu_ ? 2 * F : F;
  const int64_t R = rows.numel() / D;
  const DType dt = rows.dtype();
  s.rows = rows;
  s.rows_per_expert = rows_per_expert;
  ensure(s.fc1_out, {R, F1}, dt, device_);
  ensure(s.act_out, {R, F}, dt, device_);
  ensure(out, {R, D}, dt, device_);
  int64_t at = 0;
  for (size_t j = 0; j < experts_.size(); ++j) {
    const int64_t n = rows_per_expert[j];
    if (n > 0) {
      Tensor h = s.fc1_out.flat_view(at * F1, {n, F1});
      const Tensor b1 = bias_view(experts_[j].fc1_bias, F1);
      ops::linear_forward(rows.flat_view(at * D, {n, D}), experts_[j].fc1->weight.view({F1, D}),
                          experts_[j].fc1_bias ? &b1 : nullptr, h);
    }
    at += n;
  }
  MT_CHECK(at == R, "experts: row counts sum to ", at, ", rows ", R);
  if (R > 0) {
    if (swiglu_)
      ops::glu_forward(s.fc1_out, s.act_out, glu_);
    else
      ops::gelu_forward(s.fc1_out, s.act_out, gelu_);
  }
  at = 0;
  for (size_t j = 0; j < experts_.size(); ++j) {
    const int64_t n = rows_per_expert[j];
    if (n > 0) {
      Tensor y = out.flat_view(at * D, {n, D});
      const Tensor b2 = bias_view(experts_[j].fc2_bias, D);
      ops::linear_forward(s.act_out.flat_view(at * F, {n, F}), experts_[j].fc2->weight.view({D, F}),
                          adds_fc2_bias_ ? &b2 : nullptr, y);
    }
    at += n;
  }
}

void GroupedExperts::backward(State& s, const Tensor& d_out, Tensor& d_rows,
                              const MicroBatchInfo* mb) const {
  const int64_t D = hidden_, F = local_ffn_, F1 = swiglu_ ? 2 * F : F;
  const int64_t R = s.rows.numel() / D;
  const DType dt = s.rows.dtype();
  ensure(s.d_act, {R, F}, dt, device_);
  ensure(s.d_fc1, {R, F1}, dt, device_);
  ensure(d_rows, {R, D}, dt, device_);
  int64_t at = 0;
  for (size_t j = 0; j < experts_.size(); ++j) {
    const int64_t n = s.rows_per_expert[j];
    if (n > 0) {
      Tensor d_act = s.d_act.flat_view(at * F, {n, F});
      ops::linear_backward(s.act_out.flat_view(at * F, {n, F}),
                           experts_[j].fc2->weight.view({D, F}), d_out.flat_view(at * D, {n, D}),
                           &d_act, nullptr, nullptr);
    }
    at += n;
  }
  if (R > 0) {
    if (swiglu_)
      ops::glu_backward(s.fc1_out, s.d_act, s.d_fc1, glu_);
    else
      ops::gelu_backward(s.fc1_out, s.d_act, s.d_fc1, gelu_);
  }
  at = 0;
  for (size_t j = 0; j < experts_.size(); ++j) {
    const int64_t n = s.rows_per_expert[j];
    if (n > 0) {
      Tensor dx = d_rows.flat_view(at * D, {n, D});
      ops::linear_backward(s.rows.flat_view(at * D, {n, D}), experts_[j].fc1->weight.view({F1, D}),
                           s.d_fc1.flat_view(at * F1, {n, F1}), &dx, nullptr, nullptr);
    }
    at += n;
  }
  if (R == 0) return;
  // The weight gradients (now, or at the zero-bubble schedule's W), expert by expert.
  // All four are the layer's per-micro-batch state (read in place when the block keeps them).
  const WeightGradInputs state = state_input(mb);
  run_weight_grads(mb, {s.act_out, d_out, s.rows, s.d_fc1},
                   [this, counts = s.rows_per_expert](const std::vector<Tensor>& in) {
                     weight_grads(counts, in[0], in[1], in[2], in[3]);
                   },
                   {state, state, state, state});
}

void GroupedExperts::weight_grads(const std::vector<int64_t>& rows_per_expert,
                                  const Tensor& act_out, const Tensor& d_out, const Tensor& rows,
                                  const Tensor& d_fc1) const {
  const int64_t D = hidden_, F = local_ffn_, F1 = swiglu_ ? 2 * F : F;
  int64_t at = 0;
  for (size_t j = 0; j < experts_.size(); ++j) {
    const int64_t n = rows_per_expert[j];
    if (n > 0) {
      Tensor dw2 = experts_[j].fc2->grad.view({D, F}), db2 = grad_view(experts_[j].fc2_bias, D);
      ops::linear_weight_grad(act_out.flat_view(at * F, {n, F}), experts_[j].fc2->weight,
                              d_out.flat_view(at * D, {n, D}), &dw2,
                              experts_[j].fc2_bias ? &db2 : nullptr);
      Tensor dw1 = experts_[j].fc1->grad.view({F1, D}), db1 = grad_view(experts_[j].fc1_bias, F1);
      ops::linear_weight_grad(rows.flat_view(at * D, {n, D}), experts_[j].fc1->weight,
                              d_fc1.flat_view(at * F1, {n, F1}), &dw1,
                              experts_[j].fc1_bias ? &db1 : nullptr);
    }
    at += n;
  }
}

}  // namespace megatron::moe
