#include "megatron/training/groups.h"

namespace megatron::training {

TrainerGroups TrainerGroups::from_mesh(const parallel::Mesh& mesh) {
  TrainerGroups g{&mesh.world(), &mesh.tp(), &mesh.dp()};
  g.pp = &mesh.pp();
  g.embedding = &mesh.embedding();
  g.model = &mesh.model();
  g.ep = &mesh.ep();
  g.expert_dp = &mesh.expert_dp();
  g.dp_shard = &mesh.dp_shard();
  g.dp_replica = &mesh.dp_replica();
  g.expert_tp = &mesh.expert_tp();
  g.cp = &mesh.cp();
  g.dp_cp = &mesh.dp_cp();
  g.dp_shard_cp = &mesh.dp_shard_cp();
  return g;
}

TrainerGroups TrainerGroups::weight_replicas() const {
  if (cp == nullptr || cp->size() == 1) return *this;
  TrainerGroups g = *this;
  g.dp = dp_cp;
  // Hybrid sharding: the shards span one instance's dp x cp ranks, the replicas stay the ranks
  // holding the same shard (and cp rank) in each instance.
  g.dp_shard = dp_shard_cp ? dp_shard_cp : dp_cp;
  // With ep > 1 the mesh's expert dp already spans what cp x dp leaves to it.
  if (ep == nullptr || ep->size() == 1) g.expert_dp = dp_cp;
  return g;
}

TrainerGroups complete_groups(const config::Recipe& recipe, const TrainerGroups& g,
                              parallel::Communicator* single) {
  TrainerGroups out;
  out.world = g.world;
  out.tp = g.tp ? g.tp : single;
  out.dp = g.dp ? g.dp : single;
  out.pp = g.pp ? g.pp : single;
  out.embedding = g.embedding ? g.embedding : single;
  out.model = g.model ? g.model : out.tp;
  out.ep = g.ep ? g.ep : single;
  out.dp_shard = g.dp_shard ? g.dp_shard : out.dp;
  out.dp_replica = g.dp_replica ? g.dp_replica : single;
  out.expert_tp = g.expert_tp ? g.expert_tp : out.tp;
  out.cp = g.cp ? g.cp : single;
  out.dp_cp = g.dp_cp ? g.dp_cp : out.dp;
  out.expert_dp = g.expert_dp ? g.expert_dp : (g.ep ? single : out.dp_cp);
  out.dp_shard_cp = g.dp_shard_cp ? g.dp_shard_cp : out.dp_cp;
  const auto& p = recipe.parallel;
  MT_INPUT_CHECK(
      p.tensor == out.tp->size() && p.data == out.dp->size() && p.pipeline == out.pp->size(),
      recipe.source_path, ": parallel.tensor=", p.tensor, " pipeline=", p.pipeline,
      " data=", p.data, " do not match the process groups (tp ", out.tp->size(), ", pp ",
      out.pp->size(), ", dp ", out.dp->size(), ")");
  MT_INPUT_CHECK(p.context == out.cp->size() && out.dp_cp->size() == out.dp->size() * p.context,
                 recipe.source_path, ": parallel.context=", p.context,
                 " does not match the process groups (cp ", out.cp->size(), ", dp x cp ",
                 out.dp_cp->size(), ", dp ", out.dp->size(), ")");
  const int64_t etp = p.expert_tensor == 0 ? p.tensor : p.expert_tensor;
  // The expert mesh covers the ranks of one pipeline stage: ep x expert dp x etp = tp x cp x dp.
  MT_INPUT_CHECK(p.expert == out.ep->size() && etp == out.expert_tp->size() &&
                     out.ep->size() * out.expert_dp->size() * out.expert_tp->size() ==
                         out.dp_cp->size() * out.tp->size(),
                 recipe.source_path, ": parallel.expert=", p.expert, " expert_tensor=", etp,
                 " do not match the process groups (ep ", out.ep->size(), ", expert dp ",
                 out.expert_dp->size(), ", expert tp ", out.expert_tp->size(), ", tp ",
                 out.tp->size(), ", dp x cp ", out.dp_cp->size(), ")");
  MT_INPUT_CHECK(p.num_distributed_optimizer_instances == out.dp_replica->size() &&
                     out.dp_shard->size() * out.dp_replica->size() == out.dp->size(),
                 recipe.source_path, ": parallel.num_distributed_optimizer_instances=",
                 p.num_distributed_optimizer_instances, " does not match the process groups (dp ",
                 out.dp->size(), ", shard ", out.dp_shard->size(), ", replicas ",
                 out.dp_replica->size(), ")");
  return out;
}

}  // namespace megatron::training
