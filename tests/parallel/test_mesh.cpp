// Mesh under MPI: the launch environment, and for every layout of the world the communicators
// the mesh creates hold exactly the ranks the placement planned (checked with an all-gather of
// world ranks inside each group), on the real node and on simulated multi-node topologies.
// mpirun-np: 1 2 4 8
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "megatron/parallel/mesh.h"
#include "parallel_test.h"

namespace mp = megatron::parallel;
using megatron::DType;
using megatron::Shape;
using megatron::Tensor;
using mp::GroupKind;
using mp::testing::launch;
using mp::testing::world;

namespace {

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

// The launch info of this rank with its node renamed (simulated topologies).
mp::LaunchInfo on_node(const std::string& name) {
  mp::LaunchInfo info = launch();
  info.node_name = name;
  return info;
}

void check_groups(const mp::Mesh& mesh, const std::string& what) {
  SCOPED_TRACE(what);
  const int me = world().rank();
  const mp::Placement& p = mesh.placement();
  for (GroupKind kind : mp::kAllGroupKinds) {
    SCOPED_TRACE(std::string(mp::group_kind_name(kind)));
    mp::Communicator& g = mesh.group(kind);
    const std::vector<int>& want = p.group(kind, me);
    ASSERT_EQ(g.size(), static_cast<int>(want.size()));
    EXPECT_EQ(g.rank(), p.group_rank(kind, me));
    EXPECT_EQ(g.name(), mp::group_kind_name(kind));
    Tensor mine = Tensor::empty(Shape{1}, DType::I32);
    mine.data<int32_t>()[0] = me;
    Tensor all = Tensor::zeros(Shape{g.size()}, DType::I32);
    g.all_gather(mine, all);
    for (int i = 0; i < g.size(); ++i) {
      EXPECT_EQ(all.data<int32_t>()[i], want[i]) << "member " << i;
      EXPECT_EQ(g.world_rank_of(i), want[i]);
    }
  }
  const auto& rp = p.ranks[me];
  EXPECT_EQ(mesh.tp_rank(), rp.tp);
  EXPECT_EQ(mesh.tp().rank(), rp.tp);
  EXPECT_EQ(mesh.cp().rank(), rp.cp);
  EXPECT_EQ(mesh.dp().rank(), mesh.dp_rank());
  EXPECT_EQ(mesh.pp().rank(), mesh.pp_rank());
  EXPECT_EQ(mesh.ep().rank(), mesh.ep_rank());
  EXPECT_EQ(mesh.expert_dp().rank(), mesh.expert_dp_rank());
  EXPECT_EQ(&mesh.world(), &world());
  EXPECT_EQ(mesh.is_first_stage(), rp.pp == 0);
  EXPECT_EQ(mesh.is_last_stage(), rp.pp == mesh.sizes().pp - 1);
}

}  // namespace

TEST(Launch, InfoUnderMpirun) {
  const mp::LaunchInfo& info = launch();
  const int n = world().size(), me = world().rank();
  EXPECT_EQ(info.world_rank, me);
  EXPECT_EQ(info.world_size, n);
  EXPECT_EQ(info.node_name, mp::local_node_name());
  EXPECT_GE(mp::default_cpu_threads(info), 1);
  // Node names as every rank sees them; the layout must follow them (ctest also runs this
  // program with SLURMD_NODENAME=n1/n2 alternating over the ranks of one machine, as two
  // slurmd instances on one host would).
  constexpr int64_t kName = 64;
  Tensor mine = Tensor::zeros(Shape{kName}, DType::U8);
  ASSERT_LT(info.node_name.size(), static_cast<size_t>(kName));
  std::memcpy(mine.raw(), info.node_name.data(), info.node_name.size());
  Tensor all = Tensor::zeros(Shape{kName * n}, DType::U8);
  world().all_gather(mine, all);
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) names.emplace_back(static_cast<const char*>(all.raw()) + r * kName);
  const mp::LaunchInfo want = mp::layout_from_node_names(me, names);
  EXPECT_EQ(info.local_rank, want.local_rank);
  EXPECT_EQ(info.local_size, want.local_size);
  EXPECT_EQ(info.node_index, want.node_index);
  EXPECT_EQ(info.num_nodes, want.num_nodes);
  if (std::getenv("MEGATRON_TEST_TWO_NODE_NAMES")) {
    ASSERT_NE(std::getenv("SLURMD_NODENAME"), nullptr) << "the two-node run lost its node names";
  }
  if (const char* simulated = std::getenv("SLURMD_NODENAME")) {
    EXPECT_EQ(info.node_name, simulated);
    if (info.node_name == "n1" || info.node_name == "n2") {  // the alternating ctest run
      EXPECT_EQ(info.num_nodes, n > 1 ? 2 : 1);
      EXPECT_EQ(info.node_index, me % 2);
      EXPECT_EQ(info.local_rank, me / 2);
      EXPECT_EQ(info.local_size, (n + 1 - me % 2) / 2);
    }
  } else {
    // One machine: one node, and the shared-memory split agrees with Open MPI's numbering.
    EXPECT_EQ(info.num_nodes, 1);
    EXPECT_EQ(info.node_index, 0);
    EXPECT_EQ(info.local_rank, me);
    if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
      EXPECT_EQ(info.launcher, "mpirun");
      EXPECT_EQ(info.local_rank, std::atoi(env));
      EXPECT_EQ(info.local_size, std::atoi(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")));
    }
  }
  // A second discovery gives the same answer.
  const mp::LaunchInfo again = mp::discover_launch_info();
  EXPECT_EQ(again.node_name, info.node_name);
  EXPECT_EQ(again.local_rank, info.local_rank);
  EXPECT_EQ(again.node_index, info.node_index);
}

TEST(Mesh, Tp2Pp2Dp2OnEightRanks) {
  if (world().size() != 8 || launch().num_nodes != 1) GTEST_SKIP() << "needs 8 ranks, 1 node";
  mp::Mesh mesh(sizes(2, 1, 1, 2, 2), world(), launch());
  check_groups(mesh, "tp2 pp2 dp2");
  const int me = world().rank();
  // Default order on one node: tp fastest, then dp, then pp.
  EXPECT_EQ(mesh.tp_rank(), me % 2);
  EXPECT_EQ(mesh.dp_rank(), me / 2 % 2);
  EXPECT_EQ(mesh.pp_rank(), me / 4);
  EXPECT_EQ(mesh.placement().group(GroupKind::TP, me),
            (std::vector<int>{me / 2 * 2, me / 2 * 2 + 1}));
  EXPECT_EQ(mesh.placement().group(GroupKind::PP, me), (std::vector<int>{me % 4, me % 4 + 4}));
  // A tp all-reduce sums the two neighbours, a pp broadcast comes from stage 0.
  Tensor t = Tensor::empty(Shape{1}, DType::I64);
  t.data<int64_t>()[0] = me;
  mesh.tp().all_reduce(t, mp::ReduceOp::Sum);
  EXPECT_EQ(t.data<int64_t>()[0], 4 * (me / 2) + 1);
  t.data<int64_t>()[0] = me;
  mesh.pp().broadcast(t, 0);
  EXPECT_EQ(t.data<int64_t>()[0], me % 4);
  // Embedding group: first and last stage.
  EXPECT_EQ(mesh.embedding().size(), 2);
  EXPECT_TRUE(mesh.has_embedding());
  if (me == 0) std::printf("%s", mesh.placement().report().c_str());
}

TEST(Mesh, SimulatedCyclicTwoNodeTopology) {
  if (world().size() < 4) GTEST_SKIP() << "needs 4+ ranks";
  const int me = world().rank();
  // Slurm cyclic distribution over two nodes: even ranks on n1, odd ranks on n2.
  mp::Mesh mesh(sizes(2, 1, 1, world().size() / 2, 1), world(), on_node(me % 2 ? "n2" : "n1"));
  check_groups(mesh, "cyclic");
  EXPECT_TRUE(mesh.placement().warnings.empty());
  // TP partners share this rank's parity (= node).
  for (int r : mesh.placement().group(GroupKind::TP, me)) EXPECT_EQ(r % 2, me % 2);
}

TEST(Mesh, EveryLayoutMatchesPlacement) {
  const int n = world().size(), me = world().rank();
  const std::vector<std::string> orders = {"tp-cp-ep-dp-pp", "pp-dp-ep-cp-tp"};
  int meshes = 0;
  for (int64_t tp = 1; tp <= n; ++tp) {
    if (n % tp) continue;
    for (int64_t cp = 1; cp <= n / tp; ++cp) {
      if ((n / tp) % cp) continue;
      for (int64_t pp = 1; pp <= n / (tp * cp); ++pp) {
        if ((n / (tp * cp)) % pp) continue;
        const int64_t dp = n / (tp * cp * pp);
        for (int64_t ep = 1; ep <= dp; ep *= 2) {
          if (dp % ep) continue;
          for (const auto& order : orders) {
            // Alternate the real node with a simulated uneven two-node split (first 3/4 of
            // the ranks on "a", the rest on "b").
            const bool simulated = meshes % 2 == 1;
            const mp::LaunchInfo info =
                simulated ? on_node(me < (3 * n + 3) / 4 ? "a" : "b") : launch();
            const auto s = sizes(tp, cp, ep, dp, pp, order);
            mp::Mesh mesh(s, world(), info);
            check_groups(mesh, s.str() + (simulated ? " (a/b nodes)" : ""));
            ++meshes;
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(meshes, 0);
}

TEST(Mesh, AutoDataParallelSize) {
  mp::MeshSizes s = sizes(1, 1, 1, 0, 1);
  mp::Mesh mesh(s, world(), launch());
  EXPECT_EQ(mesh.sizes().dp, world().size());
  EXPECT_EQ(mesh.dp().size(), world().size());
  EXPECT_EQ(mesh.tp().size(), 1);
}

TEST(Mesh, BadSizesFailOnEveryRankBeforeCommunicating) {
  const int n = world().size();
  try {
    mp::Mesh mesh(sizes(n + 1, 1, 1, 1, 1), world(), launch());
    FAIL();
  } catch (const megatron::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("world of"), std::string::npos) << e.what();
  }
  EXPECT_THROW(mp::Mesh(sizes(1, 1, 1, n, 1, "tp-cp-dp-pp"), world(), launch()),
               megatron::InputError);
  world().barrier();
}

TEST(Mesh, SingleRankWorldUsesGroupsOfOne) {
  // A split of one rank: a Mesh over it needs no further MPI.
  auto self = world().split(world().rank(), 0, "self");
  mp::Mesh mesh(mp::MeshSizes{}, *self, launch());
  for (GroupKind kind : mp::kAllGroupKinds) EXPECT_EQ(mesh.group(kind).size(), 1);
  EXPECT_EQ(mesh.dp().world_rank_of(0), world().rank());
}
