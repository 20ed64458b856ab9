#include "megatron/parallel/mesh.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <unordered_map>

#include "megatron/core/error.h"
#include "megatron/parallel/mpi_communicator.h"

namespace megatron::parallel {
namespace {

constexpr std::array<std::string_view, 5> kAxisNames = {"tp", "cp", "ep", "dp", "pp"};

std::vector<std::string> split_order(const std::string& order) {
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : order) {
    if (c == '-') {
      tokens.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  tokens.push_back(cur);
  return tokens;
}

// The five mixed-radix axes of the logical mesh, innermost first.
struct Axes {
  std::array<std::string, 5> name;
  std::array<int64_t, 5> size{};
  std::array<int64_t, 5> stride{};
  int index_of(std::string_view n) const {
    for (int i = 0; i < 5; ++i)
      if (name[static_cast<size_t>(i)] == n) return i;
    return -1;
  }
};

// Whether EP is cut from a flattened index over two axes (tp x dp or cp x dp) rather than
// being an axis of the mesh itself.
bool carved(const MeshSizes& s) { return s.experts_fold_tp() || s.experts_span_cp(); }

Axes make_axes(const MeshSizes& s) {
  Axes a;
  const std::vector<std::string> tokens = split_order(s.order);
  int64_t stride = 1;
  for (size_t i = 0; i < 5; ++i) {
    a.name[i] = tokens[i];
    const std::string& t = tokens[i];
    a.size[i] = t == "tp"   ? s.tp
                : t == "cp" ? s.cp
                : t == "ep" ? (carved(s) ? 1 : s.ep)
                : t == "dp" ? (carved(s) ? s.dp : s.dp / s.ep)
                            : s.pp;
    a.stride[i] = stride;
    stride *= a.size[i];
  }
  return a;
}

int64_t coord(const Axes& a, int64_t position, std::string_view axis) {
  const size_t i = static_cast<size_t>(a.index_of(axis));
  return position / a.stride[i] % a.size[i];
}

}  // namespace

// ---- MeshSizes -------------------------------------------------------------------------

void MeshSizes::validate(int64_t world) const {
  const std::pair<const char*, int64_t> all[] = {
      {"tp", tp}, {"cp", cp}, {"ep", ep}, {"dp", dp}, {"pp", pp}};
  for (const auto& [name, v] : all)
    MT_INPUT_CHECK(v >= 1, "parallel size ", name, "=", v, " must be at least 1");
  MT_INPUT_CHECK(tp * cp * dp * pp == world, "parallel sizes tp=", tp, " x cp=", cp, " x dp=", dp,
                 " x pp=", pp, " = ", tp * cp * dp * pp, " do not match the world of ", world,
                 " ranks");
  MT_INPUT_CHECK(etp == 0 || etp == tp || etp == 1, "expert tensor parallel size etp=", etp,
                 " must be 1 or the tensor parallel size tp=", tp);
  if (experts_fold_tp()) {
    MT_INPUT_CHECK(cp == 1, "expert tensor parallel size etp=1 below tp=", tp,
                   " needs context parallel size cp=1 (got ", cp, ")");
    MT_INPUT_CHECK((tp * dp) % ep == 0, "expert parallel size ep=", ep,
                   " must divide tp x dp = ", tp * dp,
                   " (with etp=1, EP is carved out of TP x DP)");
  } else if (experts_span_cp()) {
    MT_INPUT_CHECK((cp * dp) % ep == 0, "expert parallel size ep=", ep,
                   " must divide cp x dp = ", cp * dp,
                   " (with context parallelism, EP is carved out of CP x DP)");
  } else {
    MT_INPUT_CHECK(dp % ep == 0, "expert parallel size ep=", ep,
                   " must divide the data parallel size dp=", dp, " (EP is carved out of DP)");
  }
  MT_INPUT_CHECK(dp_instances >= 1 && dp % dp_instances == 0, "distributed optimizer instances ",
                 dp_instances, " must divide the data parallel size dp=", dp);
  std::vector<std::string> tokens = split_order(order);
  std::vector<std::string> sorted = tokens;
  std::sort(sorted.begin(), sorted.end());
  MT_INPUT_CHECK(sorted == (std::vector<std::string>{"cp", "dp", "ep", "pp", "tp"}),
                 "parallel order '", order,
                 "' must name each of tp, cp, ep, dp, pp exactly once, joined by '-'");
}

MeshSizes MeshSizes::resolved(int64_t world) const {
  MeshSizes s = *this;
  if (s.dp == 0) {
    const int64_t model = tp * cp * pp;
    MT_INPUT_CHECK(model >= 1 && world % model == 0, "world of ", world,
                   " ranks is not divisible by tp=", tp, " x cp=", cp, " x pp=", pp,
                   " (data parallel size 'auto')");
    s.dp = world / model;
  }
  return s;
}

std::string MeshSizes::str() const {
  return concat("tp=", tp, " cp=", cp, " ep=", ep, " dp=", dp, " pp=", pp, " order=", order,
                dp_instances > 1 ? concat(" dp_instances=", dp_instances) : std::string(),
                experts_fold_tp() ? concat(" etp=", expert_tp()) : std::string());
}

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::TP:
      return "tp";
    case GroupKind::CP:
      return "cp";
    case GroupKind::DP:
      return "dp";
    case GroupKind::PP:
      return "pp";
    case GroupKind::EP:
      return "ep";
    case GroupKind::ExpertDP:
      return "expert_dp";
    case GroupKind::Model:
      return "model";
    case GroupKind::Embedding:
      return "embedding";
    case GroupKind::DPCP:
      return "dp_cp";
    case GroupKind::DPShard:
      return "dp_shard";
    case GroupKind::DPReplica:
      return "dp_replica";
    case GroupKind::ExpertTP:
      return "expert_tp";
    case GroupKind::DPShardCP:
      return "dp_shard_cp";
  }
  return "?";
}

// ---- Placement -------------------------------------------------------------------------

const std::vector<int>& Placement::group(GroupKind kind, int world_rank) const {
  const size_t k = static_cast<size_t>(kind);
  MT_CHECK(world_rank >= 0 && world_rank < world_size(), "world rank ", world_rank,
           " outside the mesh of ", world_size());
  return groups[k][static_cast<size_t>(group_of_rank[k][static_cast<size_t>(world_rank)])];
}

int Placement::group_rank(GroupKind kind, int world_rank) const {
  const std::vector<int>& g = group(kind, world_rank);
  return static_cast<int>(std::find(g.begin(), g.end(), world_rank) - g.begin());
}

namespace {

// Hybrid sharding: each dp group cut into dp_instances runs of consecutive dp ranks.
void add_hybrid_sharding_groups(Placement& p, const MeshSizes& sizes, int world) {
  const size_t ks = static_cast<size_t>(GroupKind::DPShard);
  const size_t kr = static_cast<size_t>(GroupKind::DPReplica);
  p.group_of_rank[ks].assign(static_cast<size_t>(world), -1);
  p.group_of_rank[kr].assign(static_cast<size_t>(world), -1);
  const size_t shard = static_cast<size_t>(sizes.dp / sizes.dp_instances);
  for (const auto& g : p.groups[static_cast<size_t>(GroupKind::DP)]) {
    for (size_t first = 0; first < g.size(); first += shard) {
      std::vector<int> members(g.begin() + static_cast<std::ptrdiff_t>(first),
                               g.begin() + static_cast<std::ptrdiff_t>(first + shard));
      for (int r : members)
        p.group_of_rank[ks][static_cast<size_t>(r)] = static_cast<int>(p.groups[ks].size());
      p.groups[ks].push_back(std::move(members));
    }
    for (size_t i = 0; i < shard; ++i) {
      std::vector<int> members;
      for (size_t j = i; j < g.size(); j += shard) members.push_back(g[j]);
      for (int r : members)
        p.group_of_rank[kr][static_cast<size_t>(r)] = static_cast<int>(p.groups[kr].size());
      p.groups[kr].push_back(std::move(members));
    }
  }
}

// dp_shard x cp: each dp_cp group cut by instance, in dp_cp order.
void add_shard_cp_groups(Placement& p, int world) {
  const size_t k = static_cast<size_t>(GroupKind::DPShardCP);
  const size_t kr = static_cast<size_t>(GroupKind::DPReplica);
  p.group_of_rank[k].assign(static_cast<size_t>(world), -1);
  for (const auto& g : p.groups[static_cast<size_t>(GroupKind::DPCP)]) {
    // The instance of a rank: its position in its replica group.
    std::map<int, std::vector<int>> by_instance;
    for (int r : g) {
      const auto& replica =
          p.groups[kr][static_cast<size_t>(p.group_of_rank[kr][static_cast<size_t>(r)])];
      const auto at = std::find(replica.begin(), replica.end(), r) - replica.begin();
      by_instance[static_cast<int>(at)].push_back(r);
    }
    for (auto& [instance, members] : by_instance) {
      for (int r : members)
        p.group_of_rank[k][static_cast<size_t>(r)] = static_cast<int>(p.groups[k].size());
      p.groups[k].push_back(std::move(members));
    }
  }
}

// Embedding: first + last stage of each pipeline; middle stages alone.
void add_embedding_groups(Placement& p, int world) {
  const size_t k = static_cast<size_t>(GroupKind::Embedding);
  p.group_of_rank[k].assign(static_cast<size_t>(world), -1);
  for (const auto& pipe : p.groups[static_cast<size_t>(GroupKind::PP)]) {
    std::vector<int> ends = {pipe.front()};
    if (pipe.size() > 1) ends.push_back(pipe.back());
    for (int r : ends)
      p.group_of_rank[k][static_cast<size_t>(r)] = static_cast<int>(p.groups[k].size());
    p.groups[k].push_back(ends);
    for (size_t i = 1; i + 1 < pipe.size(); ++i) {
      p.group_of_rank[k][static_cast<size_t>(pipe[i])] = static_cast<int>(p.groups[k].size());
      p.groups[k].push_back({pipe[i]});
    }
  }
}

}  // namespace

Placement plan_placement(const MeshSizes& sizes_in, const std::vector<std::string>& node_of_rank) {
  const int world = static_cast<int>(node_of_rank.size());
  MT_CHECK(world >= 1, "plan_placement of an empty world");
  const MeshSizes sizes = sizes_in.resolved(world);
  sizes.validate(world);

  Placement p;
  p.sizes = sizes;
  p.ranks.resize(static_cast<size_t>(world));
  p.rank_at_position.assign(static_cast<size_t>(world), -1);

  // Nodes in first-appearance order, each with its ranks ascending.
  std::vector<std::vector<int>> node_ranks;
  std::unordered_map<std::string, int> node_index;
  for (int r = 0; r < world; ++r) {
    const std::string& name = node_of_rank[static_cast<size_t>(r)];
    auto [it, inserted] = node_index.emplace(name, static_cast<int>(p.nodes.size()));
    if (inserted) {
      p.nodes.push_back(name);
      node_ranks.emplace_back();
    }
    const int n = it->second;
    node_ranks[static_cast<size_t>(n)].push_back(r);
    p.ranks[static_cast<size_t>(r)].node = n;
  }
  std::vector<size_t> used(node_ranks.size(), 0);  // ranks of each node handed out so far
  auto free_of = [&](size_t n) { return node_ranks[n].size() - used[n]; };
  auto assign = [&](size_t n, const std::vector<int64_t>& positions) {
    for (int64_t pos : positions)
      p.rank_at_position[static_cast<size_t>(pos)] = node_ranks[n][used[n]++];
  };
  // First node with `need` free ranks. Within one phase `need` is fixed and free counts only
  // shrink, so nodes skipped once stay unusable: a cursor per phase keeps this linear.
  size_t cursor = 0, cursor_need = 0;
  auto first_fit = [&](size_t need) -> int {
    if (need != cursor_need) cursor = 0, cursor_need = need;
    while (cursor < node_ranks.size() && free_of(cursor) < need) ++cursor;
    return cursor < node_ranks.size() ? static_cast<int>(cursor) : -1;
  };

  const Axes axes = make_axes(sizes);
  const int tp_axis = axes.index_of("tp");
  const int64_t block = axes.stride[static_cast<size_t>(tp_axis)] * sizes.tp;
  const int64_t tp_stride = axes.stride[static_cast<size_t>(tp_axis)];
  // Positions of the TP group holding `first` (its member with tp coordinate 0).
  auto tp_group_positions = [&](int64_t first) {
    std::vector<int64_t> g;
    for (int64_t i = 0; i < sizes.tp; ++i) g.push_back(first + i * tp_stride);
    return g;
  };

  // 1. Whole TP blocks, in order.
  std::vector<int64_t> split_blocks;
  for (int64_t b = 0; b < world / block; ++b) {
    const int n = first_fit(static_cast<size_t>(block));
    if (n < 0) {
      split_blocks.push_back(b);
      continue;
    }
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < block; ++i) positions.push_back(b * block + i);
    assign(static_cast<size_t>(n), positions);
  }
  // 2. Blocks that fit nowhere whole: their TP groups, each wherever it fits.
  std::vector<std::vector<int64_t>> loose_groups;
  for (int64_t b : split_blocks) {
    for (int64_t i = 0; i < block; ++i) {
      const int64_t pos = b * block + i;
      if (coord(axes, pos, "tp") != 0) continue;
      std::vector<int64_t> g = tp_group_positions(pos);
      const int n = first_fit(static_cast<size_t>(sizes.tp));
      if (n < 0)
        loose_groups.push_back(std::move(g));
      else
        assign(static_cast<size_t>(n), g);
    }
  }
  // 3. TP groups that fit in no node: position by position into what is left.
  for (const auto& g : loose_groups) {
    for (int64_t pos : g) {
      const int n = first_fit(1);
      MT_CHECK(n >= 0, "placement ran out of ranks");
      assign(static_cast<size_t>(n), {pos});
    }
  }

  // Coordinates.
  const bool ep_inner = axes.index_of("ep") < axes.index_of("dp");
  for (int64_t pos = 0; pos < world; ++pos) {
    const int r = p.rank_at_position[static_cast<size_t>(pos)];
    MT_CHECK(r >= 0, "placement left position ", pos, " empty");
    RankPlacement& rp = p.ranks[static_cast<size_t>(r)];
    rp.world_rank = r;
    rp.position = pos;
    rp.tp = coord(axes, pos, "tp");
    rp.cp = coord(axes, pos, "cp");
    rp.ep = coord(axes, pos, "ep");
    rp.expert_dp = coord(axes, pos, "dp");
    rp.pp = coord(axes, pos, "pp");
    if (carved(sizes)) {
      // The flattened (tp or cp) x dp index, cut into ep (inner) and expert dp.
      rp.dp = coord(axes, pos, "dp");
      const int64_t q =
          sizes.experts_fold_tp() ? rp.tp + sizes.tp * rp.dp : rp.cp + sizes.cp * rp.dp;
      rp.ep = q % sizes.ep;
      rp.expert_dp = q / sizes.ep;
    } else {
      rp.dp =
          ep_inner ? rp.ep + sizes.ep * rp.expert_dp : rp.expert_dp + (sizes.dp / sizes.ep) * rp.ep;
    }
    rp.has_embedding = rp.pp == 0 || rp.pp == sizes.pp - 1;
  }

  // Groups of the ranks sharing key(rank), listed in the order their first member's position
  // comes, members ordered by rank_in_group(rank).
  auto make_groups_by = [&](GroupKind kind, auto key, auto rank_in_group) {
    const size_t k = static_cast<size_t>(kind);
    std::map<int64_t, int> index_of_key;
    p.group_of_rank[k].assign(static_cast<size_t>(world), -1);
    for (int64_t pos = 0; pos < world; ++pos) {
      const int r = p.rank_at_position[static_cast<size_t>(pos)];
      const RankPlacement& rp = p.ranks[static_cast<size_t>(r)];
      auto [it, inserted] = index_of_key.emplace(key(rp), static_cast<int>(p.groups[k].size()));
      if (inserted) p.groups[k].emplace_back();
      p.groups[k][static_cast<size_t>(it->second)].push_back(r);
      p.group_of_rank[k][static_cast<size_t>(r)] = it->second;
    }
    for (auto& g : p.groups[k])
      std::sort(g.begin(), g.end(), [&](int a, int b) {
        return rank_in_group(p.ranks[static_cast<size_t>(a)]) <
               rank_in_group(p.ranks[static_cast<size_t>(b)]);
      });
  };
  // The key of the positions that differ only along `varying` axes.
  auto position_key = [&](std::initializer_list<std::string_view> varying) {
    return [&axes, axes_varying = std::vector<std::string_view>(varying)](const RankPlacement& r) {
      int64_t key = r.position;
      for (std::string_view v : axes_varying)
        key -= coord(axes, r.position, v) * axes.stride[static_cast<size_t>(axes.index_of(v))];
      return key;
    };
  };
  auto by_position = [](const RankPlacement& r) { return r.position; };
  auto make_groups = [&](GroupKind kind, std::initializer_list<std::string_view> varying) {
    make_groups_by(kind, position_key(varying), by_position);
  };
  make_groups(GroupKind::TP, {"tp"});
  make_groups(GroupKind::CP, {"cp"});
  // The dp group in dp-coordinate order (position order differs when ep follows dp).
  make_groups_by(GroupKind::DP, position_key({"ep", "dp"}),
                 [](const RankPlacement& r) { return r.dp; });
  make_groups(GroupKind::PP, {"pp"});
  if (sizes.experts_fold_tp()) {
    const int64_t edp = sizes.tp * sizes.dp / sizes.ep;
    make_groups_by(
        GroupKind::EP, [&](const RankPlacement& r) { return r.pp * edp + r.expert_dp; },
        [](const RankPlacement& r) { return r.ep; });
    make_groups_by(
        GroupKind::ExpertDP, [&](const RankPlacement& r) { return r.pp * sizes.ep + r.ep; },
        [](const RankPlacement& r) { return r.expert_dp; });
    make_groups_by(GroupKind::ExpertTP, by_position, by_position);
  } else if (sizes.experts_span_cp()) {
    // Per pipeline stage and tp rank: ep x expert dp = cp x dp.
    const int64_t edp = sizes.cp * sizes.dp / sizes.ep;
    auto stage_tp = [&](const RankPlacement& r) { return r.pp * sizes.tp + r.tp; };
    make_groups_by(
        GroupKind::EP, [&](const RankPlacement& r) { return stage_tp(r) * edp + r.expert_dp; },
        [](const RankPlacement& r) { return r.ep; });
    make_groups_by(
        GroupKind::ExpertDP, [&](const RankPlacement& r) { return stage_tp(r) * sizes.ep + r.ep; },
        [](const RankPlacement& r) { return r.expert_dp; });
    make_groups(GroupKind::ExpertTP, {"tp"});
  } else {
    make_groups(GroupKind::EP, {"ep"});
    make_groups(GroupKind::ExpertDP, {"dp"});
    make_groups(GroupKind::ExpertTP, {"tp"});
  }
  make_groups(GroupKind::Model, {"tp", "pp"});
  make_groups(GroupKind::DPCP, {"ep", "dp", "cp"});
  add_hybrid_sharding_groups(p, sizes, world);
  add_shard_cp_groups(p, world);
  add_embedding_groups(p, world);

  // Warnings: TP groups spanning nodes.
  for (const auto& g : p.groups[static_cast<size_t>(GroupKind::TP)]) {
    std::vector<int> nodes;
    for (int r : g) {
      const int n = p.ranks[static_cast<size_t>(r)].node;
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
    }
    if (nodes.size() <= 1) continue;
    std::ostringstream os;
    os << "tp group [" << join(g, " ") << "] spans nodes ";
    for (size_t i = 0; i < nodes.size(); ++i)
      os << (i ? ", " : "") << p.nodes[static_cast<size_t>(nodes[i])];
    os << ": no node had " << sizes.tp << " ranks left (ranks per node:";
    for (size_t n = 0; n < node_ranks.size(); ++n) os << " " << node_ranks[n].size();
    os << "); tensor-parallel traffic will cross the network";
    p.warnings.push_back(os.str());
  }
  // Warnings: hybrid sharding's shard groups spanning nodes (their gathers and reduce-scatters
  // were meant to stay inside one).
  if (sizes.dp_instances > 1) {
    for (const auto& g : p.groups[static_cast<size_t>(GroupKind::DPShard)]) {
      std::vector<int> nodes;
      for (int r : g) {
        const int n = p.ranks[static_cast<size_t>(r)].node;
        if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
      }
      if (nodes.size() > 1)
        p.warnings.push_back(concat("dp_shard group [", join(g, " "), "] spans ", nodes.size(),
                                    " nodes: sharded data-parallel traffic will cross the network "
                                    "(fewer ranks per shard group: raise "
                                    "parallel.num_distributed_optimizer_instances)"));
    }
  }
  return p;
}

std::string Placement::report(size_t max_items) const {
  std::ostringstream os;
  auto more = [&](size_t total) {
    if (total > max_items) os << "  ... " << total - max_items << " more\n";
  };
  os << "mesh " << sizes.str() << " on " << world_size() << " ranks, " << nodes.size() << " node"
     << (nodes.size() == 1 ? "" : "s") << "\n";
  std::vector<std::vector<int>> node_ranks(nodes.size());
  for (const RankPlacement& r : ranks)
    node_ranks[static_cast<size_t>(r.node)].push_back(r.world_rank);
  for (size_t n = 0; n < nodes.size() && n < max_items; ++n)
    os << "  node " << nodes[n] << ": ranks " << join(node_ranks[n], " ") << "\n";
  more(nodes.size());
  os << "  rank node         tp cp ep edp dp pp emb\n";
  for (size_t i = 0; i < ranks.size() && i < max_items; ++i) {
    const RankPlacement& r = ranks[i];
    char line[160];
    std::snprintf(line, sizeof(line), "  %4d %-12.12s %2lld %2lld %2lld %3lld %2lld %2lld %s\n",
                  r.world_rank, nodes[static_cast<size_t>(r.node)].c_str(),
                  static_cast<long long>(r.tp), static_cast<long long>(r.cp),
                  static_cast<long long>(r.ep), static_cast<long long>(r.expert_dp),
                  static_cast<long long>(r.dp), static_cast<long long>(r.pp),
                  r.has_embedding ? "y" : "-");
    os << line;
  }
  more(ranks.size());
  for (GroupKind kind : kAllGroupKinds) {
    const auto& gs = groups[static_cast<size_t>(kind)];
    os << "  " << group_kind_name(kind) << ":";
    for (size_t gi = 0; gi < gs.size() && gi < max_items; ++gi) {
      std::vector<int> ns;
      for (int r : gs[gi]) {
        const int n = ranks[static_cast<size_t>(r)].node;
        if (std::find(ns.begin(), ns.end(), n) == ns.end()) ns.push_back(n);
      }
      os << " [" << join(gs[gi], " ") << "]@";
      for (size_t i = 0; i < ns.size(); ++i)
        os << (i ? "+" : "") << nodes[static_cast<size_t>(ns[i])];
    }
    if (gs.size() > max_items) os << " ... " << gs.size() - max_items << " more";
    os << "\n";
  }
  for (size_t i = 0; i < warnings.size() && i < max_items; ++i)
    os << "  WARNING: " << warnings[i] << "\n";
  more(warnings.size());
  return os.str();
}

// ---- Mesh ------------------------------------------------------------------------------

Mesh::~Mesh() = default;

Mesh::Mesh(const MeshSizes& sizes_in, Communicator& world, const LaunchInfo& launch)
    : world_(&world) {
  const int n = world.size();
  const MeshSizes sizes = sizes_in.resolved(n);
  sizes.validate(n);

  // Every rank's node name (the gather also proves all ranks are here, under the communicator's
  // watchdog, before the group splits below block).
  placement_ = plan_placement(sizes, all_gather_strings(world, launch.node_name, "node name"));

  const int me = world.rank();
  if (n == 1) {
    for (GroupKind kind : kAllGroupKinds)
      groups_[static_cast<size_t>(kind)] = make_single_process_communicator(
          std::string(group_kind_name(kind)), world.world_rank_of(me));
    return;
  }
  auto* mpi = dynamic_cast<MpiCommunicator*>(&world);
  MT_CHECK(mpi != nullptr, "Mesh over ", n, " ranks needs an MpiCommunicator world, got group '",
           world.name(), "'");
  for (GroupKind kind : kAllGroupKinds) {
    const size_t k = static_cast<size_t>(kind);
    const int color = placement_.group_of_rank[k][static_cast<size_t>(me)];
    const int key = placement_.group_rank(kind, me);
    auto comm = mpi->split(color, key, std::string(group_kind_name(kind)));
    const auto& members = placement_.group(kind, me);
    MT_CHECK(comm && comm->size() == static_cast<int>(members.size()) && comm->rank() == key,
             "group ", group_kind_name(kind), " came out with ", comm ? comm->size() : 0,
             " ranks, planned ", members.size());
    groups_[k] = std::move(comm);
  }
}

std::unique_ptr<Mesh> Mesh::single_process() {
  std::unique_ptr<Mesh> m(new Mesh());
  m->owned_world_ = make_single_process_communicator("world", 0);
  m->world_ = m->owned_world_.get();
  m->placement_ = plan_placement(MeshSizes{}, {local_node_name()});
  for (GroupKind kind : kAllGroupKinds)
    m->groups_[static_cast<size_t>(kind)] =
        make_single_process_communicator(std::string(group_kind_name(kind)), 0);
  return m;
}

}  // namespace megatron::parallel
