#include "megatron/optimizer/optimizer.h"

#include <cmath>

#include "megatron/backend/ops.h"

namespace megatron::optim {

Optimizer::Optimizer(ParamStore& store, const OptimizerSettings& settings)
    : store_(&store), settings_(settings) {
  MT_CHECK(store.finalized(), "optimizer built before the parameter store was finalized");
  MT_INPUT_CHECK(settings.type == "adamw" || settings.type == "sgd",
                 "optimizer.type: unknown optimizer '", settings.type, "' (expected adamw or sgd)");
  m_ = Tensor::zeros({store.numel()}, DType::F32);
  if (settings.type == "adamw") v_ = Tensor::zeros({store.numel()}, DType::F32);
}

void Optimizer::step(double lr) {
  ++steps_;
  math::AdamWParams p{};
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(settings_.beta1);
  p.beta2 = static_cast<float>(settings_.beta2);
  p.eps = static_cast<float>(settings_.eps);
  p.bias_correction1 = static_cast<float>(1.0 - std::pow(settings_.beta1, steps_));
  p.bias_correction2 = static_cast<float>(1.0 - std::pow(settings_.beta2, steps_));
  for (Parameter* param : store_->params()) {
    const Shape flat{param->value.numel()};
    Tensor value = param->value.view(flat);
    Tensor grad = param->grad.view(flat);
    Tensor m = m_.flat_view(param->offset, flat);
    const float wd = param->weight_decay ? static_cast<float>(settings_.weight_decay) : 0.0f;
    if (settings_.type == "adamw") {
      p.weight_decay = wd;
      Tensor v = v_.flat_view(param->offset, flat);
      ops::adamw_step(value, grad, m, v, p);
    } else {
      // SGD with momentum: m = beta1 * m + g + wd * w; w -= lr * m
      float* w = value.data<float>();
      const float* g = grad.data<float>();
      float* mom = m.data<float>();
      for (int64_t i = 0; i < flat.numel(); ++i) {
        mom[i] = p.beta1 * mom[i] + g[i] + wd * w[i];
        w[i] -= p.lr * mom[i];
      }
    }
  }
}

double global_grad_norm(ParamStore& store, parallel::Communicator& model_parallel) {
  double sum = 0.0;
  for (const Parameter* p : store.params()) {
    const bool counted_here = !p->shard.replicated() || model_parallel.rank() == 0;
    if (counted_here) sum += ops::sum_squares(p->grad);
  }
  if (model_parallel.size() > 1) {
    Tensor t = Tensor::wrap(&sum, {1}, DType::F64);
    model_parallel.all_reduce(t, parallel::ReduceOp::Sum);
  }
  return std::sqrt(sum);
}

double clip_grads(ParamStore& store, double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  Tensor g = store.grads();
  ops::scale_inplace(g, static_cast<float>(factor));
  return factor;
}

}  // namespace megatron::optim
