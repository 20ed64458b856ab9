#pragma once
// The step's data-parallel gradient reductions over the ParamStore's buffer: the dense region over
// dp, and (MoE models) the experts' region (ParamStore::expert_begin() on) over the
// expert-data-parallel group, each bucketed and, with the distributed optimizer, sharded over its
// own group. Only the dense buckets overlap the last backward (expert gradients finish at the
// end of it); the norm groups say where the optimizer's segments must be summed.
#include <cstdint>
#include <memory>
#include <vector>

#include "megatron/optimizer/grad_sync.h"
#include "megatron/optimizer/optimizer.h"
#include "megatron/training/groups.h"

namespace megatron::training {

class GradientSync {
 public:
  GradientSync(ParamStore& store, const TrainerGroups& groups, bool distributed,
               int64_t bucket_elements);

  // The buffer ranges this rank's optimizer steps (both regions).
  std::vector<optim::BufferRange> owned() const;
  void begin_last_backward() { dense_->begin_last_backward(); }
  void grads_ready_below(int64_t watermark) { dense_->grads_ready_below(watermark); }
  void finish();
  void gather_params();

  bool distributed() const { return dense_->distributed(); }
  optim::DataParallelGrads* dense() const { return dense_.get(); }
  optim::DataParallelGrads* experts() const { return experts_.get(); }  // null: no experts
  // Where the gradient norm's dense sum is sharded (dp with the distributed optimizer), and the
  // experts' groups (empty without experts).
  parallel::Communicator* dense_sharded_over() const { return distributed() ? dp_ : nullptr; }
  optim::ExpertNormGroups expert_norm_groups() const;

 private:
  std::unique_ptr<optim::DataParallelGrads> dense_, experts_;
  parallel::Communicator *dp_, *ep_, *expert_dp_;
};

}  // namespace megatron::training
