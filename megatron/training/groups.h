#pragma once
// The process groups training uses (from the mesh; all of size one for a single process).
#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/parallel/mesh.h"

namespace megatron::training {

struct TrainerGroups {
  parallel::Communicator* world;
  parallel::Communicator* tp;
  parallel::Communicator* dp;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* embedding = nullptr;  // first + last pipeline stage
  parallel::Communicator* model = nullptr;      // tp x pp (gradient norm)
  parallel::Communicator* ep =
      nullptr;  // expert parallel (MoE; carved out of dp, cp x dp or tp x dp)
  parallel::Communicator* expert_dp = nullptr;  // where expert gradients are reduced
  // Hybrid sharding (parallel.num_distributed_optimizer_instances > 1): the dense shards' group
  // and the group of their replicas (null: dp and none).
  parallel::Communicator* dp_shard = nullptr;
  parallel::Communicator* dp_replica = nullptr;
  // The experts' tensor-parallel group (null: tp); a group of one with expert_tensor 1 under
  // tp > 1, where ep and expert_dp span the tp ranks.
  parallel::Communicator* expert_tp = nullptr;
  // Context parallelism: the ranks splitting each sequence (null: none), and dp x cp, the
  // ranks holding the same weights (null: dp).
  parallel::Communicator* cp = nullptr;
  parallel::Communicator* dp_cp = nullptr;
  // dp_shard x cp: what the dense shards span with context parallelism (null: dp_cp).
  parallel::Communicator* dp_shard_cp = nullptr;

  // Every group of a mesh: the one place a mesh becomes the trainer's groups.
  static TrainerGroups from_mesh(const parallel::Mesh& mesh);

  // Whether the experts are whole while the dense layers are tensor parallel.
  bool experts_fold_tp() const { return expert_tp != nullptr && expert_tp->size() != tp->size(); }
  // The groups as the weights see them: the cp ranks of a data-parallel rank hold the same
  // weights and see different tokens, so every reduction over replicas (gradients, losses,
  // target counts, optimizer shards, checkpoint writers) runs over dp x cp. Itself without cp.
  TrainerGroups weight_replicas() const;
};

// The given groups with groups of one (`single`) where none are given, checked against the
// recipe's layout
// (parallel.tensor/pipeline/data/context/expert/num_distributed_optimizer_instances): an InputError
// naming the recipe when they differ.
TrainerGroups complete_groups(const config::Recipe& recipe, const TrainerGroups& given,
                              parallel::Communicator* single);

}  // namespace megatron::training
