#pragma once
// The step's data-parallel gradient reductions and weight gathers, by sharding strategy
// (parallel.data_parallel_sharding_strategy; megatron/params/sharding.h):
//   no_shard, optim   bucketed all-reduce / reduce-scatter of the whole gradient buffer during
//                     the last micro-batch's backward (optimizer/grad_sync.h): the dense region
//                     over dp (the shard group with hybrid sharding), the experts' region
//                     (ParamStore::expert_begin() on; MoE) over expert dp;
//   optim_grads       per-unit reduce-scatter of every micro-batch's gradients into the shards
//                     (distributed/fully_sharded.h), weights whole: gathered after the step;
//   optim_grads_params  + weights gathered per unit just before use.
// The norm groups say where the optimizer's segments must be summed.
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/distributed/fully_sharded.h"
#include "megatron/optimizer/grad_sync.h"
#include "megatron/optimizer/onebit_adam.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/training/groups.h"

namespace megatron::training {

// What ParamStore::finalize shards for this recipe on these groups.
DataParallelSharding sharding_for(const config::Recipe& recipe, const TrainerGroups& groups);

class GradientSync {
 public:
  // store: finalized with sharding_for(recipe, groups). groups: complete (Trainer::check_groups).
  GradientSync(ParamStore& store, const TrainerGroups& groups);

  // Before the step's first forward.
  void begin_step() {
    if (units_) units_->begin_step();
  }
  void begin_last_backward() {
    if (!units_ && !local_) dense_->begin_last_backward();
  }
  void grads_ready_below(int64_t watermark) {
    if (!units_ && !local_) dense_->grads_ready_below(watermark);
  }
  // Every gradient reduced into this rank's owned segments.
  void finish();
  // The pipeline computes weight gradients after their backward (W passes): sharded gradients
  // are reduce-scattered at the step's end, after the last W (distributed/fully_sharded.h).
  void defer_weight_grads(bool deferred) {
    if (units_) units_->set_deferred_weight_grads(deferred);
  }
  // After the step: every rank's updated weights where the layers read them.
  void gather_params();
  // The hooks the models announce their units to (null unless gradients are sharded).
  UnitHooks* unit_hooks() { return units_.get(); }

  // Whether the dense / expert optimizer state is sharded over more than one rank.
  bool dense_sharded() const;
  bool expert_sharded() const;
  // Whether this rank holds the first copy of its shards (hybrid sharding: replica 0), i.e.
  // writes them to checkpoints.
  bool first_replica() const { return replicas_ == nullptr || replicas_->rank() == 0; }
  // Where the gradient norm's dense sum is sharded (the shard group with a sharded optimizer),
  // and the experts' groups (empty without experts). With local gradients (1-bit Adam after its
  // freeze) the norm sums every rank's over data parallel as well: the root of the sum of the
  // ranks' squared norms, the same on every rank.
  parallel::Communicator* dense_sharded_over() const {
    return dense_sharded() || local_ ? shard_ : nullptr;
  }
  optim::ExpertNormGroups expert_norm_groups() const;
  // Payload bytes this rank handed to data-parallel collectives since the last call.
  int64_t take_bytes();
  // parallel.grad_compression topk on the bucketed reductions (optim/grad_sync.h).
  void compress_topk(double ratio);
  void set_topk_density(double density);
  // Its error-feedback residuals, this rank's own, by name ("dense.B", "expert.B": region and
  // bucket); empty without compression.
  std::vector<std::pair<std::string, Tensor>> compression_residuals() const;
  // optimizer.type onebit_adam (optim/onebit_adam.h): its momentum exchange over the dense and
  // expert data-parallel groups.
  optim::MomentumExchange* use_onebit_adam();
  // ZeRO++'s int8 weight gathers / gradient reduce-scatters (distributed/quantized_comm.h).
  void quantize_sharded(bool weights, bool grads) {
    if (units_) units_->set_quantized(weights, grads);
  }
  // 1-bit Adam after its freeze: the gradients stay on their rank (no data-parallel reduction).
  void set_local_grads(bool local) { local_ = local; }

 private:
  ParamStore* store_;
  std::unique_ptr<optim::DataParallelGrads> dense_, experts_;
  std::unique_ptr<distributed::FullyShardedUnits> units_;
  std::unique_ptr<optim::OnebitMomentumExchange> onebit_;
  bool local_ = false;
  parallel::Communicator *shard_, *replicas_, *ep_, *expert_dp_;
  parallel::Communicator* experts_folded_pp_;  // the pp group when experts fold tp, else null
};

}  // namespace megatron::training
