#pragma once
// The process-group mesh: sizes and rank order -> placement of mesh positions on the machine
// -> one communicator per group.
//
// Axes and order. The order string ("tp-cp-ep-dp-pp" by default, innermost = fastest first)
// lays the world out as a mixed-radix number. As in Megatron, EP is carved out of DP: the
// "ep" token stands for an axis of size ep and the "dp" token for one of size dp/ep (the
// expert-data-parallel axis). The full data-parallel coordinate combines the two, the one
// written first in the order being the faster:  dp = ep_idx + ep * edp_idx  when ep precedes
// dp (the default), else  dp = edp_idx + (dp/ep) * ep_idx.
//
// Expert tensor parallelism (etp, Megatron's "parallel folding"): with etp == tp (the default)
// the experts are split over tp like the dense MLP and EP is carved out of DP as above. With
// etp == 1 and tp > 1 the experts are whole and EP is carved out of tp x dp instead: the ep token
// then has size 1 in the dense layout (dp keeps its full size), and within one pipeline stage
// (cp == 1) the dense index q = tp + tp_size * dp splits as ep = q % ep, expert_dp = q / ep, so
// an ep group of at most tp ranks is a set of tensor-parallel peers (inside one node).
//
// Groups (members listed by world rank, in group-rank order):
//   tp, cp, pp          vary one axis
//   ep                  varies the ep coordinate (experts are sharded over it)
//   expert_dp           varies the expert_dp coordinate (expert parameters are reduced over it)
//   expert_tp           the experts' tensor-parallel group: tp when etp == tp, else each rank
//   dp                  varies ep and dp/ep (dense parameters are reduced over it)
//   dp_cp               dp x cp (dense gradient reduction when context parallel is on)
//   dp_shard            hybrid sharding: dp / dp_instances consecutive dp ranks (the shards of
//                       one instance: one node when the placement allows); dp itself when
//                       dp_instances == 1
//   dp_replica          hybrid sharding: the ranks holding the same shard in each instance
//   dp_shard_cp         dp_shard x cp: one instance's ranks of dp_cp (what the distributed
//                       optimizer shards over when context parallel is on; dp_cp itself when
//                       dp_instances == 1)
//   model               tp x pp (what the global gradient norm is summed over)
//   embedding           first and last pipeline stage of each pipeline (just the first when
//                       pp == 1); ranks of middle stages each form a group of one (has_embedding
//                       says which ranks hold embedding copies)
//
// Placement is topology-aware: ranks are grouped by node (node order = first appearance,
// within a node by world rank) and mesh positions are handed out node by node. Whole
// "TP blocks" (the positions spanned by the axes up to and including tp) go to nodes first;
// blocks that fit nowhere are split into their TP groups, which again go to any node with room;
// only then are positions placed one by one, and every TP group that ends up spanning nodes is
// reported in Placement::warnings. So TP stays inside a node whenever node sizes allow,
// including cyclic rank->node assignments (srun --distribution=cyclic) and uneven nodes.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/parallel/launch.h"

namespace megatron::parallel {

struct MeshSizes {
  int64_t tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  std::string order = "tp-cp-ep-dp-pp";
  // Hybrid sharding (parallel.num_distributed_optimizer_instances): dp is split into this many
  // shard groups of consecutive dp ranks.
  int64_t dp_instances = 1;
  // Expert tensor parallel size: 0 = tp; otherwise tp or 1.
  int64_t etp = 0;

  int64_t expert_tp() const { return etp == 0 ? tp : etp; }
  // Whether EP is carved out of tp x dp (etp == 1 < tp) rather than out of dp.
  bool experts_fold_tp() const { return expert_tp() != tp; }
  // Whether EP is carved out of cp x dp (context parallelism, as in Megatron-Core: the expert
  // ranks of a stage are its tp groups' cp x dp ranks, cp innermost). Then the cp ranks of one
  // sequence may hold different experts, and expert dp spans what cp x dp leaves.
  bool experts_span_cp() const { return cp > 1 && !experts_fold_tp(); }
  // The ranks of a pipeline stage that EP and expert dp divide among themselves, per expert-tp
  // rank: dp, cp x dp or tp x dp.
  int64_t expert_ranks() const { return experts_fold_tp() ? tp * dp : cp * dp; }

  // world == tp*cp*dp*pp, every size >= 1, ep divides expert_ranks(),
  // dp_instances divides dp, order a permutation of the five axis names. Throws InputError
  // naming the offending value.
  void validate(int64_t world) const;
  // dp == 0 means "the rest": world / (tp*cp*pp) (an error when that does not divide).
  MeshSizes resolved(int64_t world) const;
  std::string str() const;  // "tp=2 cp=1 ep=1 dp=2 pp=2 order=tp-cp-ep-dp-pp"
  bool operator==(const MeshSizes&) const = default;
};

enum class GroupKind : int {
  TP,
  CP,
  DP,
  PP,
  EP,
  ExpertDP,
  Model,
  Embedding,
  DPCP,
  DPShard,
  DPReplica,
  ExpertTP,
  DPShardCP
};
inline constexpr int kNumGroupKinds = 13;
inline constexpr std::array<GroupKind, kNumGroupKinds> kAllGroupKinds = {
    GroupKind::TP,       GroupKind::CP,       GroupKind::DP,        GroupKind::PP,
    GroupKind::EP,       GroupKind::ExpertDP, GroupKind::Model,     GroupKind::Embedding,
    GroupKind::DPCP,     GroupKind::DPShard,  GroupKind::DPReplica, GroupKind::ExpertTP,
    GroupKind::DPShardCP};
std::string_view group_kind_name(GroupKind kind);  // "tp", "expert_dp", "dp_cp", ...

struct RankPlacement {
  int world_rank = 0;
  int64_t position = 0;  // index in the logical mesh (mixed radix in `order`)
  int node = 0;          // index into Placement::nodes
  int64_t tp = 0, cp = 0, ep = 0, expert_dp = 0, dp = 0, pp = 0;  // coordinates
  bool has_embedding = false;                                     // first or last pipeline stage
};

struct Placement {
  MeshSizes sizes;
  std::vector<std::string> nodes;     // distinct node names, first appearance
  std::vector<RankPlacement> ranks;   // by world rank
  std::vector<int> rank_at_position;  // logical position -> world rank
  // groups[kind]: every group of that kind, each listing world ranks in group-rank order;
  // group_of_rank[kind][world rank] indexes groups[kind].
  std::array<std::vector<std::vector<int>>, kNumGroupKinds> groups;
  std::array<std::vector<int>, kNumGroupKinds> group_of_rank;
  std::vector<std::string> warnings;  // e.g. a TP group that had to span nodes

  int world_size() const { return static_cast<int>(ranks.size()); }
  const std::vector<int>& group(GroupKind kind, int world_rank) const;
  int group_rank(GroupKind kind, int world_rank) const;  // index of world_rank in its group
  // Human-readable: nodes and their ranks, each rank's coordinates, every group with the
  // node(s) it lies on, and the warnings; each list cut after max_items entries.
  std::string report(size_t max_items = 64) const;
};

// Pure (no MPI): where each mesh position goes, given the node name of every world rank.
Placement plan_placement(const MeshSizes& sizes, const std::vector<std::string>& node_of_rank);

class Mesh {
 public:
  // Collective over `world`: gathers node names (launch.node_name of each rank), plans the
  // placement and creates one communicator per group (MPI_Comm_split of `world`, which must
  // be an MpiCommunicator unless it has a single rank). `world` must outlive the mesh.
  // sizes.dp == 0 is resolved to what is left.
  Mesh(const MeshSizes& sizes, Communicator& world, const LaunchInfo& launch);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // One process, no MPI: every group (and the world) is a group of one.
  static std::unique_ptr<Mesh> single_process();

  Communicator& world() const { return *world_; }
  Communicator& tp() const { return group(GroupKind::TP); }
  Communicator& cp() const { return group(GroupKind::CP); }
  Communicator& dp() const { return group(GroupKind::DP); }
  Communicator& pp() const { return group(GroupKind::PP); }
  Communicator& ep() const { return group(GroupKind::EP); }
  Communicator& expert_dp() const { return group(GroupKind::ExpertDP); }
  Communicator& model() const { return group(GroupKind::Model); }
  Communicator& embedding() const { return group(GroupKind::Embedding); }
  Communicator& dp_cp() const { return group(GroupKind::DPCP); }
  Communicator& dp_shard() const { return group(GroupKind::DPShard); }
  Communicator& dp_replica() const { return group(GroupKind::DPReplica); }
  Communicator& dp_shard_cp() const { return group(GroupKind::DPShardCP); }
  Communicator& expert_tp() const { return group(GroupKind::ExpertTP); }
  Communicator& group(GroupKind kind) const { return *groups_[static_cast<size_t>(kind)]; }

  int world_rank() const { return world_->rank(); }
  int64_t tp_rank() const { return me().tp; }
  int64_t cp_rank() const { return me().cp; }
  int64_t dp_rank() const { return me().dp; }
  int64_t pp_rank() const { return me().pp; }
  int64_t ep_rank() const { return me().ep; }
  int64_t expert_dp_rank() const { return me().expert_dp; }
  bool is_first_stage() const { return me().pp == 0; }
  bool is_last_stage() const { return me().pp == sizes().pp - 1; }
  bool has_embedding() const { return me().has_embedding; }

  const MeshSizes& sizes() const { return placement_.sizes; }
  const Placement& placement() const { return placement_; }

 private:
  Mesh() = default;
  const RankPlacement& me() const { return placement_.ranks[static_cast<size_t>(world_->rank())]; }

  std::unique_ptr<Communicator> owned_world_;  // single_process() only
  Communicator* world_ = nullptr;
  Placement placement_;
  std::array<std::unique_ptr<Communicator>, kNumGroupKinds> groups_;
};

}  // namespace megatron::parallel
