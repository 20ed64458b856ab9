// Mesh placement without MPI: plan_placement on simulated topologies, hand-written group
// memberships, partition invariants over many layouts, node-aware TP placement and warnings.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "megatron/parallel/launch.h"
#include "megatron/parallel/mesh.h"

namespace mp = megatron::parallel;
using mp::GroupKind;
using Groups = std::vector<std::vector<int>>;

namespace {

std::vector<std::string> block_nodes(const std::vector<int>& ranks_per_node) {
  std::vector<std::string> names;
  for (size_t n = 0; n < ranks_per_node.size(); ++n)
    for (int i = 0; i < ranks_per_node[n]; ++i) names.push_back(megatron::concat("n", n + 1));
  return names;
}

std::vector<std::string> cyclic_nodes(int nodes, int world) {
  std::vector<std::string> names;
  for (int r = 0; r < world; ++r) names.push_back(megatron::concat("n", r % nodes + 1));
  return names;
}

mp::MeshSizes sizes(int64_t tp, int64_t cp, int64_t ep, int64_t dp, int64_t pp,
                    std::string order = "tp-cp-ep-dp-pp") {
  mp::MeshSizes s;
  s.tp = tp;
  s.cp = cp;
  s.ep = ep;
  s.dp = dp;
  s.pp = pp;
  s.order = std::move(order);
  return s;
}

const Groups& groups(const mp::Placement& p, GroupKind k) {
  return p.groups[static_cast<size_t>(k)];
}

bool tp_groups_node_local(const mp::Placement& p) {
  for (const auto& g : groups(p, GroupKind::TP))
    for (int r : g)
      if (p.ranks[r].node != p.ranks[g[0]].node) return false;
  return true;
}

// Structural invariants every placement must satisfy.
void check_invariants(const mp::Placement& p, const std::string& what) {
  SCOPED_TRACE(what);
  const int world = p.world_size();
  const mp::MeshSizes& s = p.sizes;
  // Positions are a permutation of the ranks.
  std::vector<int> seen(world, 0);
  for (int pos = 0; pos < world; ++pos) {
    const int r = p.rank_at_position[pos];
    ASSERT_GE(r, 0);
    ASSERT_LT(r, world);
    ++seen[r];
    EXPECT_EQ(p.ranks[r].position, pos);
    EXPECT_EQ(p.ranks[r].world_rank, r);
  }
  for (int c : seen) EXPECT_EQ(c, 1);
  const std::pair<GroupKind, int64_t> expected_size[] = {
      {GroupKind::TP, s.tp},
      {GroupKind::CP, s.cp},
      {GroupKind::DP, s.dp},
      {GroupKind::PP, s.pp},
      {GroupKind::EP, s.ep},
      {GroupKind::ExpertDP, s.expert_ranks() / s.ep},
      {GroupKind::ExpertTP, s.expert_tp()},
      {GroupKind::Model, s.tp * s.pp},
      {GroupKind::DPCP, s.dp * s.cp},
      {GroupKind::DPShardCP, s.dp / s.dp_instances * s.cp}};
  for (GroupKind k : mp::kAllGroupKinds) {
    SCOPED_TRACE(std::string(mp::group_kind_name(k)));
    std::vector<int> count(world, 0);
    const Groups& gs = groups(p, k);
    for (size_t gi = 0; gi < gs.size(); ++gi)
      for (int r : gs[gi]) {
        ++count[r];
        EXPECT_EQ(p.group_of_rank[static_cast<size_t>(k)][r], static_cast<int>(gi));
      }
    for (int c : count) EXPECT_EQ(c, 1) << "every rank in exactly one group";
    for (const auto& [kind, size] : expected_size) {
      if (kind != k) continue;
      for (const auto& g : gs) EXPECT_EQ(static_cast<int64_t>(g.size()), size);
    }
  }
  for (int r = 0; r < world; ++r) {
    const auto& rp = p.ranks[r];
    // Group rank == coordinate.
    EXPECT_EQ(p.group_rank(GroupKind::TP, r), rp.tp);
    EXPECT_EQ(p.group_rank(GroupKind::CP, r), rp.cp);
    EXPECT_EQ(p.group_rank(GroupKind::DP, r), rp.dp);
    EXPECT_EQ(p.group_rank(GroupKind::PP, r), rp.pp);
    EXPECT_EQ(p.group_rank(GroupKind::EP, r), rp.ep);
    EXPECT_EQ(p.group_rank(GroupKind::ExpertDP, r), rp.expert_dp);
    // Members of a group agree on every coordinate the group does not vary.
    for (int q : p.group(GroupKind::TP, r)) {
      EXPECT_EQ(p.ranks[q].pp, rp.pp);
      EXPECT_EQ(p.ranks[q].dp, rp.dp);
      EXPECT_EQ(p.ranks[q].cp, rp.cp);
    }
    for (int q : p.group(GroupKind::DP, r)) {
      EXPECT_EQ(p.ranks[q].tp, rp.tp);
      EXPECT_EQ(p.ranks[q].pp, rp.pp);
      EXPECT_EQ(p.ranks[q].cp, rp.cp);
    }
    EXPECT_EQ(p.group_rank(GroupKind::ExpertTP, r), s.experts_fold_tp() ? 0 : rp.tp);
    // EP and expert-DP groups lie inside the DP group (with cp: the dp x cp group; with whole
    // experts under tp: the pipeline stage); each (ep, expert_dp, expert tp) names one rank of
    // the stage.
    const auto& dp = p.group(s.experts_span_cp() ? GroupKind::DPCP : GroupKind::DP, r);
    for (GroupKind k : {GroupKind::EP, GroupKind::ExpertDP})
      for (int q : p.group(k, r)) {
        if (s.experts_fold_tp()) {
          EXPECT_EQ(p.ranks[q].pp, rp.pp);
        } else {
          EXPECT_NE(std::find(dp.begin(), dp.end(), q), dp.end());
        }
      }
    for (int q = 0; q < world; ++q) {
      if (q == r || p.ranks[q].pp != rp.pp || (!s.experts_span_cp() && p.ranks[q].cp != rp.cp))
        continue;
      EXPECT_FALSE(p.ranks[q].ep == rp.ep && p.ranks[q].expert_dp == rp.expert_dp &&
                   p.group_rank(GroupKind::ExpertTP, q) == p.group_rank(GroupKind::ExpertTP, r))
          << "ranks " << q << " and " << r << " share every expert coordinate";
    }
    // Embedding: first and last stage of the pipeline, others alone.
    const auto& pipe = p.group(GroupKind::PP, r);
    const auto& emb = p.group(GroupKind::Embedding, r);
    if (rp.has_embedding) {
      std::vector<int> want = {pipe.front()};
      if (pipe.size() > 1) want.push_back(pipe.back());
      EXPECT_EQ(emb, want);
    } else {
      EXPECT_EQ(emb, std::vector<int>{r});
    }
    EXPECT_EQ(rp.has_embedding, rp.pp == 0 || rp.pp == s.pp - 1);
  }
  // Distinct (tp, cp, dp, pp) coordinates for distinct ranks.
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> coords;
  for (const auto& rp : p.ranks) coords.insert({rp.tp, rp.cp, rp.dp, rp.pp});
  EXPECT_EQ(static_cast<int>(coords.size()), world);
}

}  // namespace

TEST(MeshSizes, ValidateNamesTheProblem) {
  EXPECT_NO_THROW(sizes(2, 1, 1, 2, 2).validate(8));
  try {
    sizes(2, 1, 1, 2, 2).validate(6);
    FAIL();
  } catch (const megatron::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("world of 6"), std::string::npos) << e.what();
  }
  try {
    sizes(1, 1, 3, 4, 2).validate(8);
    FAIL();
  } catch (const megatron::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ep=3"), std::string::npos) << e.what();
  }
  for (const char* bad :
       {"tp-cp-dp-pp", "tp-tp-ep-dp-pp", "tp-cp-ep-dp-xx", "", "tp,cp,ep,dp,pp"}) {
    try {
      sizes(2, 1, 1, 2, 2, bad).validate(8);
      FAIL() << bad;
    } catch (const megatron::InputError& e) {
      EXPECT_NE(std::string(e.what()).find("order"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(sizes(0, 1, 1, 8, 1).validate(8), megatron::InputError);
  auto s = sizes(2, 1, 1, 0, 2);
  EXPECT_EQ(s.resolved(8).dp, 2);
  EXPECT_THROW(s.resolved(6), megatron::InputError);
}

TEST(MeshPlacement, OneNodeDefaultOrder) {
  const auto p = mp::plan_placement(sizes(2, 1, 1, 2, 2), block_nodes({8}));
  check_invariants(p, "1x8");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::PP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(p, GroupKind::Model), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::Embedding), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(p, GroupKind::CP).size(), 8u);
  EXPECT_EQ(p.ranks[5].tp, 1);
  EXPECT_EQ(p.ranks[5].dp, 0);
  EXPECT_EQ(p.ranks[5].pp, 1);
}

TEST(MeshPlacement, SingleRank) {
  const auto p = mp::plan_placement(mp::MeshSizes{}, {"host"});
  check_invariants(p, "1");
  for (GroupKind k : mp::kAllGroupKinds) EXPECT_EQ(groups(p, k), (Groups{{0}}));
  EXPECT_TRUE(p.ranks[0].has_embedding);
}

TEST(MeshPlacement, FourNodesOfEightTp8) {
  const auto p = mp::plan_placement(sizes(8, 1, 1, 2, 2), block_nodes({8, 8, 8, 8}));
  check_invariants(p, "4x8");
  EXPECT_TRUE(p.warnings.empty());
  ASSERT_EQ(groups(p, GroupKind::TP).size(), 4u);
  for (int n = 0; n < 4; ++n) {
    std::vector<int> want;
    for (int i = 0; i < 8; ++i) want.push_back(8 * n + i);
    EXPECT_EQ(groups(p, GroupKind::TP)[n], want);
  }
  EXPECT_EQ(p.group(GroupKind::DP, 3), (std::vector<int>{3, 11}));
  EXPECT_EQ(p.group(GroupKind::PP, 3), (std::vector<int>{3, 19}));
  EXPECT_EQ(p.group(GroupKind::Embedding, 27), (std::vector<int>{11, 27}));
  EXPECT_EQ(p.group(GroupKind::Model, 0).size(), 16u);
  EXPECT_EQ(p.nodes, (std::vector<std::string>{"n1", "n2", "n3", "n4"}));
}

TEST(MeshPlacement, FourNodesOfEightCyclic) {
  // Slurm --distribution=cyclic: rank r on node r % 4.
  const auto p = mp::plan_placement(sizes(8, 1, 1, 2, 2), cyclic_nodes(4, 32));
  check_invariants(p, "4x8 cyclic");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(tp_groups_node_local(p));
  EXPECT_EQ(p.group(GroupKind::TP, 0), (std::vector<int>{0, 4, 8, 12, 16, 20, 24, 28}));
  EXPECT_EQ(p.group(GroupKind::TP, 1), (std::vector<int>{1, 5, 9, 13, 17, 21, 25, 29}));
  EXPECT_EQ(p.group(GroupKind::DP, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.group(GroupKind::PP, 0), (std::vector<int>{0, 2}));
}

TEST(MeshPlacement, TwoNodesOfFourCyclicHandWritten) {
  const auto p = mp::plan_placement(sizes(2, 1, 1, 2, 2), cyclic_nodes(2, 8));
  check_invariants(p, "2x4 cyclic");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(p.rank_at_position, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 2}, {4, 6}, {1, 3}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 4}, {2, 6}, {1, 5}, {3, 7}}));
  EXPECT_EQ(groups(p, GroupKind::PP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::Model), (Groups{{0, 2, 1, 3}, {4, 6, 5, 7}}));
  EXPECT_EQ(p.ranks[1].pp, 1);
  EXPECT_EQ(p.ranks[1].tp, 0);
  EXPECT_EQ(p.ranks[6].tp, 1);
  EXPECT_EQ(p.ranks[6].dp, 1);
}

TEST(MeshPlacement, UnevenNodesSixPlusTwo) {
  // tp=2 fits: 3 groups on n1, 1 on n2.
  auto p = mp::plan_placement(sizes(2, 1, 1, 4, 1), block_nodes({6, 2}));
  check_invariants(p, "6+2 tp2");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));

  // tp=2 x cp=2 blocks of 4 do not fit n1's last two ranks + n2, but TP groups still do.
  p = mp::plan_placement(sizes(2, 2, 1, 2, 1), block_nodes({6, 2}));
  check_invariants(p, "6+2 tp2 cp2");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(tp_groups_node_local(p));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::CP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));

  // Same with ranks interleaved unevenly: n1 gets 0,1,2,4,5,7; n2 gets 3,6.
  p = mp::plan_placement(sizes(2, 1, 1, 4, 1), {"n1", "n1", "n1", "n2", "n1", "n1", "n2", "n1"});
  check_invariants(p, "6+2 interleaved");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 4}, {5, 7}, {3, 6}}));

  // tp=4 cannot fit: n2 has only 2 ranks -> one TP group spans, with a warning.
  p = mp::plan_placement(sizes(4, 1, 1, 2, 1), block_nodes({6, 2}));
  check_invariants(p, "6+2 tp4");
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_NE(p.warnings[0].find("spans nodes n1, n2"), std::string::npos) << p.warnings[0];
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_NE(p.report().find("WARNING"), std::string::npos);
}

TEST(MeshPlacement, WarnsOnlyWhenUnavoidable) {
  // 3 + 5 ranks, tp=2: room for 1 + 2 groups, the fourth must span.
  auto p = mp::plan_placement(sizes(2, 1, 1, 4, 1), block_nodes({3, 5}));
  check_invariants(p, "3+5");
  EXPECT_EQ(p.warnings.size(), 1u);
  int local = 0;
  for (const auto& g : groups(p, GroupKind::TP)) local += p.ranks[g[0]].node == p.ranks[g[1]].node;
  EXPECT_EQ(local, 3);
  // tp=8 on nodes of 4: every group spans.
  p = mp::plan_placement(sizes(8, 1, 1, 1, 1), block_nodes({4, 4}));
  EXPECT_EQ(p.warnings.size(), 1u);
  // tp bigger than nothing: tp=1 never warns.
  p = mp::plan_placement(sizes(1, 1, 1, 7, 1), block_nodes({1, 2, 4}));
  check_invariants(p, "1+2+4");
  EXPECT_TRUE(p.warnings.empty());
}

TEST(MeshPlacement, OrderChangesTheFastestAxis) {
  // dp first: dp neighbours are consecutive ranks, TP strided.
  auto p = mp::plan_placement(sizes(2, 1, 1, 2, 2, "dp-tp-cp-ep-pp"), block_nodes({8}));
  check_invariants(p, "dp-tp");
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // pp first.
  p = mp::plan_placement(sizes(2, 1, 1, 2, 2, "pp-tp-cp-ep-dp"), block_nodes({8}));
  check_invariants(p, "pp-tp");
  EXPECT_EQ(groups(p, GroupKind::PP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // dp first on nodes of 4 ranks: each (dp x tp) block fills a node.
  p = mp::plan_placement(sizes(2, 1, 1, 2, 2, "dp-tp-cp-ep-pp"), block_nodes({4, 4}));
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(tp_groups_node_local(p));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // dp first on nodes of 2 ranks: the block of 4 fits nowhere; TP groups are kept in nodes
  // anyway (the order yields to the topology) and DP crosses nodes instead.
  p = mp::plan_placement(sizes(2, 1, 1, 2, 1, "dp-tp-cp-ep-pp"), block_nodes({2, 2}));
  check_invariants(p, "dp-tp 2+2");
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 2}, {1, 3}}));
}

TEST(MeshPlacement, ExpertParallelCarvedOutOfDataParallel) {
  // ep before dp (default): ep groups are consecutive dp ranks.
  auto p = mp::plan_placement(sizes(1, 1, 2, 4, 2), block_nodes({8}));
  check_invariants(p, "ep2 dp4");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(p.ranks[2].dp, 2);
  EXPECT_EQ(p.ranks[2].ep, 0);
  EXPECT_EQ(p.ranks[2].expert_dp, 1);
  // dp before ep: expert-dp groups consecutive, ep strided.
  p = mp::plan_placement(sizes(1, 1, 2, 4, 2, "tp-cp-dp-ep-pp"), block_nodes({8}));
  check_invariants(p, "dp-ep");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // With tp=2 the dp groups stride over tp.
  p = mp::plan_placement(sizes(2, 1, 2, 2, 2), block_nodes({4, 4}));
  check_invariants(p, "tp2 ep2 dp2 pp2");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP).size(), 8u);
}

// Context parallelism: EP is carved out of cp x dp with cp innermost (Megatron-Core's expert
// ranks), so an ep group of cp size is a cp group, and expert dp spans what is left of cp x dp.
TEST(MeshPlacement, ExpertParallelWithContextParallelSpansContextRanks) {
  // tp2 cp2 dp2: positions tp + 2 cp + 4 dp.
  auto p = mp::plan_placement(sizes(2, 2, 2, 2, 1), block_nodes({8}));
  check_invariants(p, "tp2 cp2 ep2 dp2");
  EXPECT_EQ(groups(p, GroupKind::CP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertTP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // ep4 over cp2 x dp2: one ep group per tp rank, no expert data parallelism.
  p = mp::plan_placement(sizes(2, 2, 4, 2, 1), block_nodes({8}));
  check_invariants(p, "tp2 cp2 ep4 dp2");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP).size(), 8u);
  EXPECT_EQ(p.ranks[6].ep, 3);
  // ep1: every expert reduced over cp x dp (the dp_cp ranks).
  p = mp::plan_placement(sizes(1, 2, 1, 2, 2), block_nodes({8}));
  check_invariants(p, "cp2 ep1 dp2 pp2");
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), groups(p, GroupKind::DPCP));
  // ep larger than cp: the ep groups take every cp rank and part of dp.
  p = mp::plan_placement(sizes(1, 2, 4, 4, 1), block_nodes({8}));
  check_invariants(p, "cp2 ep4 dp4");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // ep must divide cp x dp.
  EXPECT_THROW(mp::plan_placement(sizes(1, 2, 4, 1, 1), block_nodes({2})), megatron::InputError);
}

// Expert tensor parallelism 1 under tp (Megatron's parallel folding): EP is carved out of
// tp x dp, so an ep group of tp ranks is a tensor-parallel group and expert dp spans the rest.
TEST(MeshPlacement, WholeExpertsFoldTensorParallelIntoExpertParallel) {
  auto folded = [](int64_t tp, int64_t ep, int64_t dp, int64_t pp) {
    mp::MeshSizes s = sizes(tp, 1, ep, dp, pp);
    s.etp = 1;
    return s;
  };
  // tp2 dp2 pp2, ep2: ep = the tp groups, expert dp = the dp groups.
  auto p = mp::plan_placement(folded(2, 2, 2, 2), block_nodes({8}));
  check_invariants(p, "fold tp2 ep2 dp2 pp2");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertTP), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(groups(p, GroupKind::TP), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // ep4 over tp2 x dp2: one ep group per stage, no expert data parallelism.
  p = mp::plan_placement(folded(2, 4, 2, 2), block_nodes({8}));
  check_invariants(p, "fold tp2 ep4 dp2 pp2");
  EXPECT_EQ(groups(p, GroupKind::EP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(groups(p, GroupKind::ExpertDP).size(), 8u);
  EXPECT_EQ(p.ranks[3].ep, 3);
  // ep1: every rank of the stage holds all experts; they are reduced over tp x dp.
  p = mp::plan_placement(folded(2, 1, 2, 2), block_nodes({8}));
  check_invariants(p, "fold tp2 ep1");
  EXPECT_EQ(groups(p, GroupKind::ExpertDP), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // ep2 on two nodes, cyclic ranks: the ep groups are tp groups, inside one node each.
  p = mp::plan_placement(folded(2, 2, 4, 1), cyclic_nodes(2, 8));
  check_invariants(p, "fold cyclic");
  for (const auto& g : groups(p, GroupKind::EP)) EXPECT_EQ(p.ranks[g[0]].node, p.ranks[g[1]].node);
  Groups ep_groups = groups(p, GroupKind::EP), tp_groups = groups(p, GroupKind::TP);
  std::sort(ep_groups.begin(), ep_groups.end());
  std::sort(tp_groups.begin(), tp_groups.end());
  EXPECT_EQ(ep_groups, tp_groups);
  // Bad folds name the sizes.
  mp::MeshSizes bad = folded(2, 3, 2, 1);
  EXPECT_THROW(bad.validate(4), megatron::InputError);
  bad = folded(4, 2, 1, 1);
  bad.etp = 2;
  try {
    bad.validate(4);
    ADD_FAILURE() << "etp 2 under tp 4 accepted";
  } catch (const megatron::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("etp=2"), std::string::npos) << e.what();
  }
  bad = folded(2, 2, 1, 1);
  bad.cp = 2;
  EXPECT_THROW(bad.validate(4), megatron::InputError);
}

// The token all-to-all stays inside a node whenever tp x ep fits in one: EP groups are node-local
// for block and cyclic rank distributions, with and without tensor parallelism.
TEST(MeshPlacement, ExpertParallelGroupsStayInsideANodeWhenTheyFit) {
  auto node_local = [](const mp::Placement& p, GroupKind kind) {
    for (const auto& g : groups(p, kind))
      for (int r : g)
        if (p.ranks[r].node != p.ranks[g[0]].node) return false;
    return true;
  };
  for (const auto& [tp, ep, dp] : {std::tuple{1, 4, 8}, {2, 2, 4}, {1, 8, 8}, {4, 2, 2}}) {
    for (const bool cyclic : {false, true}) {
      const auto nodes = cyclic ? cyclic_nodes(2, 16) : block_nodes({8, 8});
      const auto p = mp::plan_placement(sizes(tp, 1, ep, dp, 16 / (tp * dp)), nodes);
      SCOPED_TRACE(megatron::concat("tp", tp, " ep", ep, " dp", dp, cyclic ? " cyclic" : " block"));
      check_invariants(p, "ep node-local");
      EXPECT_TRUE(node_local(p, GroupKind::EP));
      EXPECT_TRUE(node_local(p, GroupKind::TP));
    }
  }
}

TEST(MeshPlacement, ContextParallelGroups) {
  const auto p = mp::plan_placement(sizes(2, 2, 1, 2, 1), block_nodes({8}));
  check_invariants(p, "cp2");
  EXPECT_EQ(groups(p, GroupKind::CP), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DP), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(p, GroupKind::DPCP), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(groups(p, GroupKind::Model), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
}

// Hybrid sharding with cp: dp 4 in 2 instances, cp 2, tp 2. The shard groups of one instance
// (dp ranks {0, 1} and {2, 3}) span its cp peers too (dp_shard_cp), the replicas pair the same
// shard and cp rank across instances; without instances dp_shard_cp is dp_cp.
TEST(MeshPlacement, HybridShardingWithContextParallelGroups) {
  mp::MeshSizes s = sizes(2, 2, 1, 4, 1);
  s.dp_instances = 2;
  const auto p = mp::plan_placement(s, block_nodes({16}));
  check_invariants(p, "hybrid cp2");
  EXPECT_EQ(groups(p, GroupKind::DP),
            (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(groups(p, GroupKind::DPShard),
            (Groups{{0, 4}, {8, 12}, {1, 5}, {9, 13}, {2, 6}, {10, 14}, {3, 7}, {11, 15}}));
  EXPECT_EQ(groups(p, GroupKind::DPShardCP),
            (Groups{{0, 2, 4, 6}, {8, 10, 12, 14}, {1, 3, 5, 7}, {9, 11, 13, 15}}));
  EXPECT_EQ(groups(p, GroupKind::DPReplica),
            (Groups{{0, 8}, {4, 12}, {1, 9}, {5, 13}, {2, 10}, {6, 14}, {3, 11}, {7, 15}}));
  const auto one = mp::plan_placement(sizes(2, 2, 1, 2, 1), block_nodes({8}));
  EXPECT_EQ(groups(one, GroupKind::DPShardCP), groups(one, GroupKind::DPCP));
}

TEST(MeshPlacement, PipelineEmbeddingGroups) {
  const auto p = mp::plan_placement(sizes(1, 1, 1, 2, 4), block_nodes({8}));
  check_invariants(p, "pp4");
  EXPECT_EQ(p.group(GroupKind::Embedding, 0), (std::vector<int>{0, 6}));
  EXPECT_EQ(p.group(GroupKind::Embedding, 6), (std::vector<int>{0, 6}));
  EXPECT_EQ(p.group(GroupKind::Embedding, 2), (std::vector<int>{2}));
  EXPECT_FALSE(p.ranks[2].has_embedding);
  EXPECT_TRUE(p.ranks[7].has_embedding);
}

TEST(MeshPlacement, InvariantsOverManyLayoutsAndTopologies) {
  std::mt19937 rng(7);
  const std::vector<std::string> orders = {"tp-cp-ep-dp-pp", "tp-cp-dp-ep-pp", "dp-tp-cp-ep-pp",
                                           "pp-dp-ep-cp-tp", "tp-pp-ep-dp-cp", "ep-tp-dp-cp-pp"};
  int checked = 0;
  for (int world : {1, 2, 4, 6, 8, 12, 16, 24}) {
    std::vector<std::vector<std::string>> topologies = {
        block_nodes({world}), cyclic_nodes(2, world), cyclic_nodes(3, world)};
    std::vector<std::string> random_nodes(world);
    for (auto& n : random_nodes) n = megatron::concat("h", rng() % 3);
    topologies.push_back(random_nodes);
    for (int64_t tp = 1; tp <= world; ++tp) {
      if (world % tp) continue;
      for (int64_t cp = 1; cp <= world / tp; ++cp) {
        if ((world / tp) % cp) continue;
        for (int64_t pp = 1; pp <= world / (tp * cp); ++pp) {
          if ((world / (tp * cp)) % pp) continue;
          const int64_t dp = world / (tp * cp * pp);
          for (int64_t ep = 1; ep <= dp; ++ep) {
            if (dp % ep) continue;
            for (const auto& order : orders)
              for (const auto& topo : topologies) {
                const auto s = sizes(tp, cp, ep, dp, pp, order);
                const auto p = mp::plan_placement(s, topo);
                check_invariants(p, megatron::concat(s.str(), " world ", world));
                // TP stays in a node whenever capacity allows: warnings exactly when the
                // nodes cannot hold world/tp whole groups.
                std::map<std::string, int> per_node;
                for (const auto& n : topo) ++per_node[n];
                int64_t fit = 0;
                for (const auto& [n, c] : per_node) fit += c / tp;
                const int64_t spanning = world / tp - fit;
                EXPECT_EQ(static_cast<int64_t>(p.warnings.size()), std::max<int64_t>(0, spanning))
                    << s.str() << "\n"
                    << p.report();
                if (HasFailure()) return;
                ++checked;
              }
          }
          // Whole experts under tp (expert tensor parallel 1): ep divides tp x dp.
          for (int64_t ep = 1; cp == 1 && tp > 1 && ep <= tp * dp; ++ep) {
            if ((tp * dp) % ep) continue;
            for (const auto& order : orders) {
              mp::MeshSizes s = sizes(tp, cp, ep, dp, pp, order);
              s.etp = 1;
              check_invariants(mp::plan_placement(s, topologies[1]),
                               megatron::concat(s.str(), " world ", world));
              if (HasFailure()) return;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(MeshPlacement, ReportShowsNodesAndGroups) {
  const auto p = mp::plan_placement(sizes(2, 1, 1, 2, 2), cyclic_nodes(2, 8));
  const std::string r = p.report();
  EXPECT_NE(r.find("node n1: ranks 0 2 4 6"), std::string::npos) << r;
  EXPECT_NE(r.find("node n2: ranks 1 3 5 7"), std::string::npos) << r;
  EXPECT_NE(r.find("tp: [0 2]@n1 [4 6]@n1 [1 3]@n2 [5 7]@n2"), std::string::npos) << r;
  EXPECT_NE(r.find("dp: [0 4]@n1 [2 6]@n1 [1 5]@n2 [3 7]@n2"), std::string::npos) << r;
  EXPECT_NE(r.find("pp: [0 1]@n1+n2"), std::string::npos) << r;
  EXPECT_EQ(r.find("WARNING"), std::string::npos) << r;
}

TEST(MeshPlacement, LargeWorldPlansQuicklyAndReportsBriefly) {
  // 4096 nodes x 8 ranks, handed out cyclically.
  const int nodes = 4096, world = nodes * 8;
  const auto start = std::chrono::steady_clock::now();
  const auto p = mp::plan_placement(sizes(8, 1, 8, 512, 8), cyclic_nodes(nodes, world));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(tp_groups_node_local(p));
  EXPECT_EQ(groups(p, GroupKind::TP).size(), static_cast<size_t>(world / 8));
  EXPECT_EQ(groups(p, GroupKind::DP).size(), static_cast<size_t>(world / 512));
  const std::string r = p.report();
  EXPECT_LT(std::count(r.begin(), r.end(), '\n'), 300);
  EXPECT_NE(r.find("more"), std::string::npos);
}

TEST(LaunchLayout, LocalRanksFollowNodeNames) {
  const std::vector<std::string> names = {"a", "b", "a", "b", "a", "c"};
  auto i = mp::layout_from_node_names(4, names);
  EXPECT_EQ(i.local_rank, 2);
  EXPECT_EQ(i.local_size, 3);
  EXPECT_EQ(i.node_index, 0);
  EXPECT_EQ(i.num_nodes, 3);
  EXPECT_EQ(i.node_name, "a");
  i = mp::layout_from_node_names(3, names);
  EXPECT_EQ(i.local_rank, 1);
  EXPECT_EQ(i.local_size, 2);
  EXPECT_EQ(i.node_index, 1);
  i = mp::layout_from_node_names(5, names);
  EXPECT_EQ(i.local_rank, 0);
  EXPECT_EQ(i.local_size, 1);
  EXPECT_EQ(i.node_index, 2);
  EXPECT_EQ(mp::default_cpu_threads(i), std::max(1, mp::default_cpu_threads(mp::LaunchInfo{})));
  mp::LaunchInfo crowded;
  crowded.local_size = 100000;
  EXPECT_EQ(mp::default_cpu_threads(crowded), 1);
}

TEST(MeshSingleProcess, AllGroupsOfOne) {
  auto mesh = mp::Mesh::single_process();
  EXPECT_EQ(mesh->world().size(), 1);
  for (GroupKind k : mp::kAllGroupKinds) {
    EXPECT_EQ(mesh->group(k).size(), 1);
    EXPECT_EQ(mesh->group(k).name(), mp::group_kind_name(k));
  }
  EXPECT_EQ(mesh->tp_rank(), 0);
  EXPECT_TRUE(mesh->is_first_stage());
  EXPECT_TRUE(mesh->is_last_stage());
  EXPECT_TRUE(mesh->has_embedding());
  megatron::Tensor t = megatron::Tensor::zeros(megatron::Shape{3}, megatron::DType::F32);
  mesh->dp().all_reduce(t, mp::ReduceOp::Avg);
  EXPECT_THROW(
      mesh->dp().all_reduce(t = megatron::Tensor::zeros(megatron::Shape{3}, megatron::DType::I32),
                            mp::ReduceOp::Avg),
      megatron::Error);
  EXPECT_THROW(mesh->pp().batch_isend_irecv({{mp::P2POp::Send, t, 0}}), megatron::Error);
  EXPECT_NO_THROW(mesh->pp().batch_isend_irecv({})->wait());

  // A Mesh built over a single-process world works without MPI too.
  auto world = mp::make_single_process_communicator("world");
  mp::Mesh m(mp::MeshSizes{}, *world, mp::single_process_launch_info());
  EXPECT_EQ(m.placement().nodes.size(), 1u);
  EXPECT_EQ(&m.world(), world.get());
}
