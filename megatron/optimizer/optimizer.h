#pragma once
// AdamW (and SGD with momentum) over the ParamStore's contiguous buffers. The optimizer steps
// the store's owned segments (ParamStore::segments): the whole buffer, or this data-parallel
// rank's shards with a sharded optimizer (ZeRO-1 and beyond). Moments live in one fp32 buffer
// each, sized to the owned elements, so optimizer memory per rank falls as 1/dp. Norms and biases
// are not decayed (Parameter::weight_decay == false).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megatron/config/options.h"
#include "megatron/optimizer/grad_sync.h"
#include "megatron/optimizer/offload.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron::optim {

struct OptimizerSettings {
  config::OptimizerType type = config::OptimizerType::AdamW;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t freeze_step = 0;  // onebit_adam: AdamW's steps before the variance freezes
};

// 1-bit Adam's compression stage (optimizer/onebit_adam.h): each rank's local momentum averaged
// over the ranks its gradients are summed over.
class MomentumExchange {
 public:
  virtual ~MomentumExchange() = default;
  // How many data-parallel ranks p's gradient is summed over.
  virtual int ranks(const Parameter& p) const = 0;
  // The segments' gradient views, holding this rank's momenta, become their averages.
  virtual void average(const std::vector<ParamSegment>& segments) = 0;
};

// The part of one parameter inside an owned slice (megatron/params/sharding.h).
using Segment = ParamSegment;

class Optimizer {
 public:
  Optimizer(ParamStore& store, const OptimizerSettings& settings);
  // One update with learning rate lr; advances the step count (bias correction).
  void step(double lr);
  // onebit_adam: whether the next step is past optimizer.freeze_step (gradients stay local;
  // the momenta go through the exchange), and where they do.
  bool compressing() const;
  void set_momentum_exchange(MomentumExchange* exchange) { exchange_ = exchange; }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }  // resume
  const std::vector<Segment>& segments() const { return segments_; }
  // The moments of the segments stepped on the store's device, and (offload) of the offloaded
  // ones in host memory (empty without offload); Segment::state_offset indexes the one its
  // segment's `offloaded` names.
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  Tensor* host_exp_avg() { return offload_ ? &offload_->exp_avg() : nullptr; }
  Tensor* host_exp_avg_sq() { return offload_ ? &offload_->exp_avg_sq() : nullptr; }
  // Bytes of optimizer state on the device (offloaded state excluded).
  int64_t state_bytes() const { return static_cast<int64_t>(m_.nbytes() + v_.nbytes()); }

 private:
  ParamStore* store_;
  OptimizerSettings settings_;
  std::vector<Segment> segments_;
  Tensor m_, v_;
  std::unique_ptr<HostOffload> offload_;
  MomentumExchange* exchange_ = nullptr;
  int64_t steps_ = 0;

  void step_compressed(double lr);  // onebit_adam.cpp
};

// All-reduces a small host tensor of control values (norms, counts, flags) over `group`: in
// place on the CPU, through a copy on `via` when the group's collectives work on that device's
// memory (NCCL takes device tensors only).
void all_reduce_host(parallel::Communicator& group, Tensor& host, parallel::ReduceOp op,
                     Device via);

// The true global L2 norm of the gradients the optimizer will use. Each rank sums its segments
// (tensor-parallel-replicated parameters only on tensor-parallel rank 0, and pipeline copies of
// tied weights not at all, so each counts once), then the sum is reduced over the model-parallel
// group (tp x pp) and, when segments are data-parallel shards, over `sharded_over`. Expert
// weights (Parameter::expert; MoE) differ over the expert-parallel group as well: their sum is
// also reduced over `expert.parallel` and, when sharded, over `expert.sharded_over` instead.
// Whole experts under tp > 1 (expert tensor parallel 1) are counted on every rank and reduced
// over `expert.model` (pp) instead of tp x pp: their tp peers hold other experts or are expert
// data-parallel replicas.
struct ExpertNormGroups {
  parallel::Communicator* parallel = nullptr;      // ep (null: no experts)
  parallel::Communicator* sharded_over = nullptr;  // expert dp with the distributed optimizer
  parallel::Communicator* model = nullptr;         // etp x pp (null: model_parallel)
  int tensor_parallel_rank = -1;                   // in the experts' tp group (-1: the dense)
};
double global_grad_norm(const std::vector<Segment>& segments, int tensor_parallel_rank,
                        parallel::Communicator& model_parallel,
                        parallel::Communicator* sharded_over, ExpertNormGroups expert = {});
// Scales the segments' gradients by min(1, max_norm / norm); returns the factor applied.
double clip_grads(const std::vector<Segment>& segments, double norm, double max_norm);
// Multiplies the segments' gradients by factor.
void scale_grads(const std::vector<Segment>& segments, double factor);

}  // namespace megatron::optim
