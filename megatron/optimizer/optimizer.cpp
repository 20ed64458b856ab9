#include "megatron/optimizer/optimizer.h"

#include <algorithm>
#include <cmath>

#include "megatron/backend/ops.h"

namespace megatron::optim {
Optimizer::Optimizer(ParamStore& store, const OptimizerSettings& settings)
    : store_(&store), settings_(settings) {
  MT_CHECK(store.finalized(), "optimizer built before the parameter store was finalized");
  segments_ = store.segments();
  // Moments packed per home: the device's segments, and the offloaded ones (host).
  int64_t state = 0, host_state = 0;
  std::vector<Segment> offloaded;
  for (Segment& s : segments_) {
    int64_t& at = s.offloaded ? host_state : state;
    s.state_offset = at;
    at += s.size();
    if (s.offloaded) offloaded.push_back(s);
  }
  const bool adamw = settings.type == config::OptimizerType::AdamW;
  const bool adam = adamw || settings.type == config::OptimizerType::OnebitAdam;
  MT_INPUT_CHECK(offloaded.empty() || adamw,
                 "optimizer.offload: the host optimizer is AdamW (got optimizer.type: ",
                 config::option_name(settings.type), ")");
  if (!offloaded.empty()) offload_ = std::make_unique<HostOffload>(store, std::move(offloaded));
  // Moments live with the parameters (on the store's device).
  MT_INPUT_CHECK(adamw || store.device() == Device::CPU,
                 "optimizer.type: ", config::option_name(settings.type),
                 " runs on the CPU only (use adamw on ", device_name(store.device()), ")");
  m_ = Tensor::zeros({state}, DType::F32, store.device());
  if (adam) v_ = Tensor::zeros({state}, DType::F32, store.device());
}

void Optimizer::step(double lr) {
  if (compressing()) return step_compressed(lr);
  ++steps_;
  math::AdamWParams p{};
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(settings_.beta1);
  p.beta2 = static_cast<float>(settings_.beta2);
  p.eps = static_cast<float>(settings_.eps);
  p.bias_correction1 = static_cast<float>(1.0 - std::pow(settings_.beta1, steps_));
  p.bias_correction2 = static_cast<float>(1.0 - std::pow(settings_.beta2, steps_));
  for (const Segment& s : segments_) {
    if (s.offloaded) continue;  // stepped on the host below
    const int64_t n = s.end - s.begin;
    Tensor value = s.master;
    const Tensor& grad = s.grad;
    Tensor m = m_.flat_view(s.state_offset, {n});
    const float wd = s.param->weight_decay ? static_cast<float>(settings_.weight_decay) : 0.0f;
    if (settings_.type != config::OptimizerType::SGD) {  // AdamW, 1-bit Adam's warm-up
      p.weight_decay = wd;
      Tensor v = v_.flat_view(s.state_offset, {n});
      ops::adamw_step(value, grad, m, v, p);
    } else {
      // SGD with momentum: m = beta1 * m + g + wd * w; w -= lr * m
      float* w = value.data<float>();
      const float* g = grad.data<float>();
      float* mom = m.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        mom[i] = p.beta1 * mom[i] + g[i] + wd * w[i];
        w[i] -= p.lr * mom[i];
      }
    }
    // Mixed precision: the model (and compute) weights follow the updated master weights.
    store_->refresh_model_weights(s);
  }
  if (offload_) {
    p.weight_decay = static_cast<float>(settings_.weight_decay);
    offload_->step(p);
  }
}

void all_reduce_host(parallel::Communicator& group, Tensor& host, parallel::ReduceOp op,
                     Device via) {
  if (group.size() == 1) return;
  if (via == Device::CPU) {
    group.all_reduce(host, op);
    return;
  }
  Tensor staged = host.to(via);
  group.all_reduce(staged, op);
  host.copy_from(staged);
}

double global_grad_norm(const std::vector<Segment>& segments, int tensor_parallel_rank,
                        parallel::Communicator& model_parallel,
                        parallel::Communicator* sharded_over, ExpertNormGroups expert) {
  // One reduction over every counted segment: a single host round trip on a device.
  std::vector<Tensor> counted, counted_experts;
  Device device = Device::CPU;
  const int expert_tp_rank =
      expert.tensor_parallel_rank >= 0 ? expert.tensor_parallel_rank : tensor_parallel_rank;
  for (const Segment& s : segments) {
    device = s.grad.device();
    const int tp_rank = s.param->expert ? expert_tp_rank : tensor_parallel_rank;
    const bool counted_here =
        !s.param->shared_copy && (!s.param->shard.replicated() || tp_rank == 0);
    if (counted_here) (s.param->expert ? counted_experts : counted).push_back(s.grad);
  }
  double sum = ops::sum_squares_of(counted);
  Tensor t = Tensor::wrap(&sum, {1}, DType::F64);
  all_reduce_host(model_parallel, t, parallel::ReduceOp::Sum, device);
  if (sharded_over) all_reduce_host(*sharded_over, t, parallel::ReduceOp::Sum, device);
  if (expert.parallel == nullptr) return std::sqrt(sum);
  double expert_sum = ops::sum_squares_of(counted_experts);
  Tensor e = Tensor::wrap(&expert_sum, {1}, DType::F64);
  all_reduce_host(expert.model ? *expert.model : model_parallel, e, parallel::ReduceOp::Sum,
                  device);
  all_reduce_host(*expert.parallel, e, parallel::ReduceOp::Sum, device);
  if (expert.sharded_over)
    all_reduce_host(*expert.sharded_over, e, parallel::ReduceOp::Sum, device);
  return std::sqrt(sum + expert_sum);
}

void scale_grads(const std::vector<Segment>& segments, double factor) {
  for (const Segment& s : segments) {
    Tensor g = s.grad;
    ops::scale_inplace(g, static_cast<float>(factor));
  }
}

double clip_grads(const std::vector<Segment>& segments, double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  scale_grads(segments, factor);
  return factor;
}

}  // namespace megatron::optim
