#pragma once
// The process groups training uses (from the mesh; all of size one for a single process).
#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"

namespace megatron::training {

struct TrainerGroups {
  parallel::Communicator* world;
  parallel::Communicator* tp;
  parallel::Communicator* dp;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* embedding = nullptr;  // first + last pipeline stage
  parallel::Communicator* model = nullptr;      // tp x pp (gradient norm)
  parallel::Communicator* ep = nullptr;  // expert parallel (MoE; carved out of dp or tp x dp)
  parallel::Communicator* expert_dp = nullptr;  // where expert gradients are reduced
  // Hybrid sharding (parallel.num_distributed_optimizer_instances > 1): the dense shards' group
  // and the group of their replicas (null: dp and none).
  parallel::Communicator* dp_shard = nullptr;
  parallel::Communicator* dp_replica = nullptr;
  // The experts' tensor-parallel group (null: tp); a group of one with expert_tensor 1 under
  // tp > 1, where ep and expert_dp span the tp ranks.
  parallel::Communicator* expert_tp = nullptr;

  // Whether the experts are whole while the dense layers are tensor parallel.
  bool experts_fold_tp() const { return expert_tp != nullptr && expert_tp->size() != tp->size(); }
};

// The given groups with groups of one (`single`) where none are given, checked against the
// recipe's layout (parallel.tensor/pipeline/data/expert/num_distributed_optimizer_instances):
// an InputError naming the recipe when they differ.
TrainerGroups complete_groups(const config::Recipe& recipe, const TrainerGroups& given,
                              parallel::Communicator* single);

}  // namespace megatron::training
