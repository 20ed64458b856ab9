#include "megatron/training/grad_reductions.h"

#include "megatron/backend/ops.h"

namespace megatron::training {

void reduce_sequence_parallel_grads(ParamStore& store, const std::vector<optim::Segment>& segments,
                                    parallel::Communicator& tp, Tensor& scratch) {
  if (tp.size() == 1) return;
  // Summing after the data-parallel reduction is the same sum.
  int64_t n = 0;
  for (const optim::Segment& s : segments)
    if (s.param->tp_partial_grad) n += s.end - s.begin;
  if (n == 0) return;
  ensure(scratch, {n}, DType::F32, store.device());
  auto grad_of = [](const optim::Segment& s) { return s.grad; };
  int64_t at = 0;
  for (const optim::Segment& s : segments) {
    if (!s.param->tp_partial_grad) continue;
    scratch.flat_view(at, {s.end - s.begin}).copy_from(grad_of(s));
    at += s.end - s.begin;
  }
  tp.all_reduce(scratch, parallel::ReduceOp::Sum);
  at = 0;
  for (const optim::Segment& s : segments) {
    if (!s.param->tp_partial_grad) continue;
    grad_of(s).copy_from(scratch.flat_view(at, {s.end - s.begin}));
    at += s.end - s.begin;
  }
}

void reduce_tied_embedding_grads(const std::vector<std::unique_ptr<models::Model>>& chunks,
                                 ParamStore& store, parallel::Communicator& pp,
                                 parallel::Communicator& embedding, bool tied,
                                 bool after_dp_reduction) {
  if (pp.size() == 1 || !tied || embedding.size() == 1) return;
  if (store.sharding().grads != after_dp_reduction) return;
  for (const auto& c : chunks) {
    Parameter* w = c->word_embeddings();
    if (!w || w->frozen || !(c->stage().pre_process || c->stage().post_process)) continue;
    if (!store.sharding().grads) {
      embedding.all_reduce(w->grad, parallel::ReduceOp::Sum);
      return;
    }
    // Sharded gradients: the table is a unit of its own on both stages, so both hold the same
    // slices of it.
    for (const optim::Segment& s : store.segments()) {
      if (s.param != w) continue;
      Tensor g = s.grad;
      embedding.all_reduce(g, parallel::ReduceOp::Sum);
    }
    return;
  }
}

bool fp16_gradient_overflow(ParamStore& store, const std::vector<optim::Segment>& segments,
                            parallel::Communicator& model_group, parallel::Communicator* dp,
                            Device device, parallel::Communicator* ep) {
  if (store.model_dtype() != DType::F16) return false;
  // An overflow in the fp16 activations or their gradients reaches the fp32 main gradients as
  // inf/NaN; a main gradient beyond fp16's largest finite value (accumulated in fp32) would not
  // survive an fp16 copy either. Both count as overflow, on every device (an op).
  constexpr float kFp16Max = 65504.0f;
  float overflow = 0.0f;
  for (const optim::Segment& s : segments) {
    if (ops::count_outside(s.grad, kFp16Max) > 0) {
      overflow = 1.0f;
      break;
    }
  }
  Tensor flag = Tensor::wrap(&overflow, {1}, DType::F32);
  optim::all_reduce_host(model_group, flag, parallel::ReduceOp::Max, device);
  if (dp != nullptr) optim::all_reduce_host(*dp, flag, parallel::ReduceOp::Max, device);
  if (ep != nullptr) optim::all_reduce_host(*ep, flag, parallel::ReduceOp::Max, device);
  return overflow > 0.0f;
}

models::LossSums reduce_losses(const models::LossSums& local, parallel::Communicator& pp,
                               parallel::Communicator& dp, Device device) {
  double v[2] = {local.lm, local.aux};
  Tensor t = Tensor::wrap(v, {2}, DType::F64);
  optim::all_reduce_host(pp, t, parallel::ReduceOp::Sum, device);
  optim::all_reduce_host(dp, t, parallel::ReduceOp::Sum, device);
  return {v[0], v[1]};
}

}  // namespace megatron::training
