#include "megatron/transformer/lora.h"

#include <cmath>

#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/layers.h"

namespace megatron {

namespace {
ShardSpec tp_split(int dim, const parallel::Communicator& tp) {
  if (tp.size() == 1) return {};
  return ShardSpec{dim, ShardAxis::Tensor, tp.rank(), tp.size()};
}
}  // namespace

bool is_lora_parameter(const std::string& name) {
  auto ends_with = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  return ends_with(".lora_a.weight") || ends_with(".lora_b.weight");
}

LoRAAdapter::LoRAAdapter(ParamStore& store, const std::string& name, int64_t in, int64_t out,
                         const Shape& weight_shape, TPMode mode, parallel::Communicator& tp,
                         const LoraSpec& spec)
    : tp_(&tp),
      rank_(spec.rank),
      local_in_(in),
      local_out_(out),
      scale_(spec.scale()),
      spec_(spec),
      row_(mode == TPMode::Row) {
  MT_CHECK(spec.rank > 0, "LoRA on '", name, "': rank must be > 0");
  MT_CHECK(mode != TPMode::None || tp.size() == 1, "LoRA on '", name,
           "': a replicated Linear under tensor parallelism");
  // A: Kaiming-style normal over the input (PEFT draws it uniform with the same scale); B: 0.
  const ParamInit a_init{ParamInit::Kind::Normal, 1.0f / std::sqrt(3.0f * float(in))};
  const ParamInit b_init{ParamInit::Kind::Zeros, 0.0f};
  const int p = tp.size();
  if (mode == TPMode::Row) {
    local_in_ = in / p;
    a_ = &store.add(name + ".lora_a.weight", Shape{rank_, in}, a_init, true, tp_split(1, tp));
    b_ = &store.add(name + ".lora_b.weight", Shape{out, rank_}, b_init, true);
    return;
  }
  // Column (or no tp): B's rows are split like the base weight's (gated [2, F, D] weights keep
  // each shard's gate and up halves: B is [2, F, r]).
  Shape b_shape = weight_shape;
  int b_dim = -1;
  if (b_shape.ndim() == 0) b_shape = Shape{out, in};
  std::vector<int64_t> dims(b_shape.begin(), b_shape.end());
  dims.back() = rank_;
  b_shape = Shape(dims.begin(), dims.end());
  if (mode == TPMode::Column) {
    local_out_ = out / p;
    b_dim = b_shape.ndim() == 2 ? 0 : b_shape.ndim() - 2;
  }
  a_ = &store.add(name + ".lora_a.weight", Shape{rank_, in}, a_init, true);
  a_->tp_partial_grad = p > 1;  // each rank sees only its output columns' share of dA
  b_ = &store.add(name + ".lora_b.weight", b_shape, b_init, true,
                  b_dim >= 0 ? tp_split(b_dim, tp) : ShardSpec{});
}

Tensor LoRAAdapter::dropped(const Tensor& x, const MicroBatchInfo* mb, Tensor& buf) const {
  if (!dropout_on(mb)) return x;
  MT_CHECK(x.ndim() == 3, "LoRA dropout needs [S, B, features] inputs, got ", x.shape().str());
  kernels::DropoutRows rows;
  rows.S = x.dim(0);
  rows.B = x.dim(1);
  rows.D = x.dim(2);
  rows.batch_offset = mb->batch_offset;
  // Every position (a sequence-parallel input is gathered first) of this context-parallel rank.
  rows.seq_total = mb->cp.active() ? mb->cp.total : rows.S;
  rows.chunks = mb->cp;
  rows.d_offset = row_ ? tp_->rank() * local_in_ : 0;
  rows.d_total = row_ ? local_in_ * tp_->size() : local_in_;
  ensure(buf, x.shape(), x.dtype(), x.device());
  const DropoutSite site{spec_.seed, mb->iteration, spec_.layer, spec_.site};
  ops::dropout_rows(x, buf, rows, spec_.dropout, site.seed, site.stream());
  return buf;
}

Tensor LoRAAdapter::a_2d() const { return a_->weight.view({rank_, local_in_}); }
Tensor LoRAAdapter::b_2d() const { return b_->weight.view({local_out_, rank_}); }
Tensor LoRAAdapter::grad_a_2d() const { return a_->grad.view({rank_, local_in_}); }
Tensor LoRAAdapter::grad_b_2d() const { return b_->grad.view({local_out_, rank_}); }

void LoRAAdapter::forward_column(Tensor& h, const Tensor& x_in, Tensor& y, const MicroBatchInfo* mb,
                                 Tensor& xbuf) const {
  const Tensor x = dropped(x_in, mb, xbuf);
  const int64_t n = x.numel() / local_in_;
  ensure(h, {n, rank_}, x.dtype(), x.device());
  ops::linear_forward(x, a_2d(), nullptr, h);
  ops::scale_inplace(h, scale_);
  Tensor update = Tensor::empty({n, local_out_}, y.dtype(), y.device());
  ops::linear_forward(h, b_2d(), nullptr, update);
  Tensor y2 = y.view({n, local_out_});
  ops::add_inplace(y2, update);
}

void LoRAAdapter::forward_row(Tensor& h, const Tensor& x_in, Tensor& out, const MicroBatchInfo* mb,
                              Tensor& xbuf) const {
  const Tensor x = dropped(x_in, mb, xbuf);
  const int64_t n = x.numel() / local_in_;
  ensure(h, {n, rank_}, x.dtype(), x.device());
  ops::linear_forward(x, a_2d(), nullptr, h);
  tensor_parallel::reduce_from_region_forward(*tp_, h);
  ops::scale_inplace(h, scale_);
  ensure(out, {n, local_out_}, x.dtype(), x.device());
  ops::linear_forward(h, b_2d(), nullptr, out);
}

void LoRAAdapter::backward(const Tensor& h, const Tensor& x_in, const Tensor& dy, Tensor* dx,
                           Tensor& scratch, const MicroBatchInfo* mb, Tensor& xbuf,
                           WeightGradInputs x_kind, WeightGradInputs dy_kind) const {
  const Tensor x = dropped(x_in, mb, xbuf);  // the forward's mask again
  const int64_t n = h.dim(0);
  Tensor& dh = ensure(scratch, {n, rank_}, h.dtype(), h.device());
  const Tensor dy2 = dy.view({n, local_out_});
  ops::linear_backward(h, b_2d(), dy2, &dh, nullptr, nullptr);
  // dB += dy^T h and dA += dh^T x through run_weight_grads (now, or at the schedule's W): h is
  // the layer's state, dh this call's scratch, x the dropout buffer reused below (copied).
  run_weight_grads(mb, {h, dy2},
                   [this](const std::vector<Tensor>& in) {
                     Tensor gb = grad_b_2d();
                     ops::linear_weight_grad(in[0], b_->weight, in[1], &gb, nullptr);
                   },
                   {state_input(mb), dy_kind});
  ops::scale_inplace(dh, scale_);
  const auto weight_grad_a = [this](const std::vector<Tensor>& in) {
    Tensor ga = grad_a_2d();
    ops::linear_weight_grad(in[0], a_->weight, in[1], &ga, nullptr);
  };
  const WeightGradInputs x_in_kind = dropout_on(mb) ? WeightGradInputs::Copy : x_kind;
  if (dx == nullptr) {
    run_weight_grads(mb, {x, dh}, weight_grad_a, {x_in_kind, WeightGradInputs::Copy});
    return;
  }
  Tensor term = Tensor::empty({n, local_in_}, x.dtype(), x.device());
  ops::linear_backward(x, a_2d(), dh, &term, nullptr, nullptr);
  run_weight_grads(mb, {x, dh}, weight_grad_a, {x_in_kind, WeightGradInputs::Copy});
  if (dropout_on(mb)) {  // d(dropout)/dx: the same mask on the gradient (xbuf is free again)
    Tensor term3 = term.view(x_in.shape());
    const Tensor masked = dropped(term3, mb, xbuf);
    term.copy_from(masked);
  }
  Tensor dx2 = dx->view({n, local_in_});
  ops::add_inplace(dx2, term);
}

}  // namespace megatron
