#pragma once
// Megatron-LM's distributed-optimizer state read per parameter: Adam's moments (`exp_avg`,
// `exp_avg_sq`) and the fp32 main parameters (`param`) as global tensors under the model's
// canonical names (mlm_tensors.h), the Adam step count and the LR scheduler's state. Three
// ways Megatron stores them (docs/megatron_optimizer_state.md):
//   torch_dist, dp_reshardable (the default): per tensor-parallel rank, flat fp32 buffers of
//     the grad buffer's layout (optimizer.distributed.dp_group_idx_G...bucket_idx_K.{param,...});
//   torch_dist, fully_reshardable: optimizer.state.{param,...}.<the model's sharded key>;
//   legacy torch: mp_rank_TT/distrib_optim.pt, the same flat buffers, one file per tp rank.
// The flat layout is Megatron-Core's grad buffer: the parameters in reverse registration order,
// each start aligned to 64 elements (flat_layout below); the buffer size is checked against the
// checkpoint's, so a layout not read here (another layer spec's order, several buckets, pipeline
// stages) is an error, not a wrong assignment.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "megatron/checkpoint/distcp.h"
#include "megatron/checkpoint/pickle.h"
#include "megatron/mlm/mlm_checkpoint.h"
#include "megatron/mlm/mlm_tensors.h"

namespace megatron::mlm {

enum class OptimizerSharding { DpReshardable, FullyReshardable, Legacy };
const char* sharding_name(OptimizerSharding s);

struct FlatParam {
  std::string name;                  // canonical
  std::vector<int64_t> local_shape;  // on one tensor-parallel rank
  int64_t start = 0, end = 0;        // in the buffer
};
// A dense GPT model's parameters of one tensor-parallel rank as Megatron-Core's grad buffer packs
// them (local layer spec's registration order, reversed; starts aligned to 64).
std::vector<FlatParam> flat_layout(const MlmArgs& args, const MlmTensors& model, int64_t tp);

// Whether the checkpoint was saved with its optimizer's state (not --no-save-optim).
bool has_optimizer_state(const MlmCheckpoint& checkpoint);

class MlmOptimizerState {
 public:
  // InputError when the checkpoint holds no optimizer state (saved with --no-save-optim) or one
  // laid out otherwise than read here.
  MlmOptimizerState(const MlmCheckpoint& checkpoint, const MlmTensors& model);
  ~MlmOptimizerState();
  OptimizerSharding sharding() const { return sharding_; }
  double step() const { return step_; }  // Adam's step count (param_groups' "step")
  // "param", "exp_avg" or "exp_avg_sq" of the model tensor `name`, its global shape.
  std::vector<float> read(const std::string& kind, const std::string& name) const;
  // The LR scheduler's saved state (a dict: num_steps, max_lr, ... in samples); null if absent.
  const checkpoint::PickleValue* scheduler() const { return scheduler_.get(); }

 private:
  void read_flat(const std::string& kind) const;

  const MlmCheckpoint& ckpt_;
  const MlmTensors& model_;
  OptimizerSharding sharding_ = OptimizerSharding::DpReshardable;
  double step_ = 0;
  checkpoint::PickleRef scheduler_;
  std::vector<FlatParam> layout_;
  const checkpoint::DcpCheckpoint* dcp_ = nullptr;     // the model's (torch_dist)
  std::vector<std::unique_ptr<MlmTensors>> per_kind_;  // fully_reshardable
  // flat buffers, read once per kind: kind -> per tp rank
  mutable std::map<std::string, std::vector<std::vector<float>>> flat_;
};

}  // namespace megatron::mlm
