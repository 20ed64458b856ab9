#pragma once
// AdamW (and SGD with momentum) over the ParamStore's contiguous buffers. Optimizer state lives
// in one buffer per moment with the same layout as the parameters. Norms and biases are not
// decayed (Parameter::weight_decay == false).
#include <cstdint>
#include <string>

#include "megatron/parallel/communicator.h"
#include "megatron/transformer/parameter.h"

namespace megatron::optim {

struct OptimizerSettings {
  std::string type = "adamw";  // adamw | sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class Optimizer {
 public:
  Optimizer(ParamStore& store, const OptimizerSettings& settings);
  // One update with learning rate lr; advances the step count (bias correction).
  void step(double lr);
  int64_t steps_taken() const { return steps_; }
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }

 private:
  ParamStore* store_;
  OptimizerSettings settings_;
  Tensor m_, v_;
  int64_t steps_ = 0;
};

// The true global L2 norm of all gradients: sharded parameters summed over the tensor-parallel
// group, replicated ones counted once (only tensor-parallel rank 0 adds them).
double global_grad_norm(ParamStore& store, parallel::Communicator& model_parallel);
// Scales every gradient by min(1, max_norm / norm); returns the factor applied.
double clip_grads(ParamStore& store, double norm, double max_norm);

}  // namespace megatron::optim
