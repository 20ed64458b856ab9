// The planner's layout search and its table.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <optional>
#include <ostream>
#include <sstream>

#include "megatron/core/error.h"
#include "megatron/planning/format.h"
#include "megatron/planning/planner.h"

namespace megatron::planning {

using detail::gb;

namespace {

// Sharding needs more than one data-parallel rank to save anything.
std::vector<config::ShardingStrategy> strategies(int64_t dp) {  // dp x cp: the replicas
  using config::ShardingStrategy;
  if (dp <= 1) return {ShardingStrategy::NoShard};
  return {ShardingStrategy::NoShard, ShardingStrategy::Optim, ShardingStrategy::OptimGrads,
          ShardingStrategy::OptimGradsParams};
}

void search_layouts(const config::Recipe& recipe, const ClusterSpec& cluster,
                    int64_t tokenizer_vocab, SearchResult& result);

// Context-parallel sizes and comm types worth trying: cp 1, and each power of two dividing the
// world and the sequence into 2 cp chunks while leaving each rank at least kMinContextRows rows
// (below that the key/value hops cost more than the activations they save), with every
// cp_comm_type that the recipe's checks allow (a2a: heads divisible by tp cp). MoE and bert models
// keep the recipe's cp. (On cuda the trainer does not run cp yet; the plan sizes what it will.)
std::vector<std::pair<int64_t, config::CpCommType>> context_choices(const config::Recipe& r,
                                                                    int64_t world) {
  if (r.model.moe.enabled() || r.model.arch == config::Arch::BERT)
    return {{r.parallel.context, r.parallel.cp_comm_type}};
  std::vector<std::pair<int64_t, config::CpCommType>> out = {{1, config::CpCommType::P2P}};
  constexpr int64_t kMinContextRows = 4096;
  for (int64_t cp = 2; cp <= world && r.model.seq_length / cp >= kMinContextRows; cp *= 2)
    if (world % cp == 0 && r.model.seq_length % (2 * cp) == 0)
      for (auto comm :
           {config::CpCommType::P2P, config::CpCommType::AllGather, config::CpCommType::A2A})
        out.push_back({cp, comm});
  return out;
}

}  // namespace

SearchResult search(const config::Recipe& recipe, const ClusterSpec& cluster,
                    int64_t tokenizer_vocab) {
  SearchResult result;
  const int64_t world = cluster.world();
  for (const auto& [cp, comm] : context_choices(recipe, world)) {
    config::Recipe r = recipe;
    r.parallel.context = cp;
    r.parallel.cp_comm_type = comm;
    search_layouts(r, cluster, tokenizer_vocab, result);
  }
  std::stable_sort(result.fitting.begin(), result.fitting.end(),
                   [](const PlanReport& a, const PlanReport& b) {
                     if (a.time.step != b.time.step) return a.time.step < b.time.step;
                     return a.memory().total < b.memory().total;
                   });
  return result;
}

namespace {

// One point of the search space (tp, pp and the recipe's cp fix dp).
struct Candidate {
  int64_t tp, pp, ep, etp, vpp;
  std::optional<config::PipelineSchedule> schedule;
  int64_t micro;
  config::RecomputeGranularity recompute;
  config::ShardingStrategy strategy;
};

// The recipe with the candidate's layout.
config::Recipe with_layout(const config::Recipe& recipe, const Candidate& k) {
  config::Recipe c = recipe;
  c.parallel.tensor = k.tp;
  c.parallel.pipeline = k.pp;
  c.parallel.data = 0;
  c.parallel.expert = k.ep;
  c.parallel.expert_tensor = k.etp == k.tp ? 0 : k.etp;
  c.parallel.virtual_pipeline =
      k.vpp > 1 ? std::optional<int64_t>(k.vpp) : std::optional<int64_t>();
  c.parallel.pipeline_schedule = k.schedule;
  c.parallel.pipeline_layers.clear();
  c.parallel.sequence_parallel = k.tp > 1 && recipe.model.seq_length % k.tp == 0;
  c.training.micro_batch_size = k.micro;
  c.training.recompute = k.recompute;
  // The strategy alone decides (its aliases would contradict no_shard).
  c.parallel.data_parallel_sharding_strategy = k.strategy;
  c.optimizer.distributed = false;
  c.training.use_distributed_optimizer = false;
  return c;
}

// Plans the candidate when the recipe accepts it on this world; counts it.
void try_candidate(const config::Recipe& recipe, const Candidate& k, const ClusterSpec& cluster,
                   int64_t tokenizer_vocab, SearchResult& result) {
  config::Recipe c = with_layout(recipe, k);
  PlanReport p;
  try {
    c.validate_for_world(cluster.world());
    p = plan(c, cluster, tokenizer_vocab);
  } catch (const InputError&) {
    return;  // not a valid layout for this world / batch
  }
  ++result.candidates;
  if (!p.fits) {
    ++result.too_big;
    return;
  }
  result.fitting.push_back(std::move(p));
}

// Expert parallelism (MoE) at tp x pp: every ep dividing cp x dp with the experts split over tp
// (etp = tp); with whole experts (etp 1 under tp, sequence parallel, cp 1) every ep dividing
// tp x dp. Dense models: ep 1.
std::vector<std::pair<int64_t, int64_t>> expert_layouts(const config::ModelConfig& m, int64_t tp,
                                                        int64_t cp, int64_t dp) {
  std::vector<std::pair<int64_t, int64_t>> eps = {{1, tp}};  // (ep, etp)
  const bool can_fold = m.moe.enabled() && tp > 1 && cp == 1 && m.seq_length % tp == 0;
  for (int64_t ep = 2; ep <= cp * dp && m.moe.enabled(); ++ep)
    if ((cp * dp) % ep == 0 && m.moe.num_experts % ep == 0) eps.push_back({ep, tp});
  for (int64_t ep = 1; ep <= tp * dp && can_fold; ++ep)
    if ((tp * dp) % ep == 0 && m.moe.num_experts % ep == 0) eps.push_back({ep, 1});
  return eps;
}

// Every (tp, pp, ep, vpp / schedule, micro-batch, recompute, sharding) layout at the recipe's
// cp.
void search_layouts(const config::Recipe& recipe, const ClusterSpec& cluster,
                    int64_t tokenizer_vocab, SearchResult& result) {
  const int64_t world = cluster.world();
  const auto& m = recipe.model;
  const auto& tr = recipe.training;
  const int64_t cp = recipe.parallel.context;
  std::vector<int64_t> micros;
  for (int64_t b = 1; b <= tr.global_batch_size; b *= 2) micros.push_back(b);
  if (std::find(micros.begin(), micros.end(), tr.micro_batch_size) == micros.end())
    micros.push_back(tr.micro_batch_size);
  const std::vector<config::RecomputeGranularity> recomputes = {
      config::RecomputeGranularity::None, config::RecomputeGranularity::Selective,
      config::RecomputeGranularity::Full};
  // Pipeline variants: 1F1B, ZB-H1, ZB-V and DualPipeV (where the recipe's device and batch run
  // them: validation decides) and the recipe's interleaving.
  std::vector<std::pair<int64_t, std::optional<config::PipelineSchedule>>> variants = {
      {1, std::nullopt},
      {1, config::PipelineSchedule::ZbH1},
      {2, config::PipelineSchedule::ZbV},
      {2, config::PipelineSchedule::DualPipeV}};
  if (recipe.parallel.virtual_stages() > 1)
    variants.push_back({recipe.parallel.virtual_stages(), std::nullopt});
  for (int64_t tp = 1; tp <= std::min(cluster.gpus_per_node, world); ++tp) {
    if (cluster.gpus_per_node % tp != 0 || m.num_attention_heads % tp != 0 ||
        m.query_groups() % tp != 0 || m.ffn() % tp != 0)
      continue;
    for (int64_t pp = 1; pp <= m.num_layers; ++pp) {
      if (m.num_layers % pp != 0 || world % (tp * pp * cp) != 0) continue;
      const int64_t dp = world / (tp * pp * cp);
      for (const auto& [ep, etp] : expert_layouts(m, tp, cp, dp))
        for (const auto& [vpp, schedule] : variants) {
          if (vpp > 1 && (pp == 1 || m.num_layers % (pp * vpp) != 0)) continue;
          if (schedule && pp == 1) continue;
          for (int64_t micro : micros) {
            if (tr.global_batch_size % (micro * dp) != 0) continue;
            for (const config::RecomputeGranularity rc : recomputes)
              for (const config::ShardingStrategy strategy : strategies(dp * cp))
                try_candidate(recipe, {tp, pp, ep, etp, vpp, schedule, micro, rc, strategy},
                              cluster, tokenizer_vocab, result);
          }
        }
    }
  }
}

}  // namespace

namespace {

// "optim_grads", "optim x2" (hybrid, 2 instances), "+off0.5" with optimizer offload.
std::string sharding_name(const Layout& l) {
  std::ostringstream os;
  os << config::option_name(l.sharding);
  if (l.instances > 1) os << " x" << l.instances;
  if (l.offload > 0) os << " +off" << l.offload;
  return os.str();
}

}  // namespace

std::string search_table(const SearchResult& result, size_t top) {
  std::ostringstream os;
  os << "search: " << result.candidates << " valid layouts, " << result.too_big << " do not fit, "
     << result.fitting.size() << " fit";
  if (result.fitting.empty()) {
    os << "\n";
    return os.str();
  }
  os << "; fastest " << std::min(top, result.fitting.size()) << " by estimated step time:\n";
  os << std::right << std::setw(4) << "#" << std::setw(4) << "tp" << std::setw(4) << "pp"
     << std::setw(6) << "dp" << std::setw(14) << "cp" << std::setw(4) << "ep" << std::setw(4)
     << "etp" << std::setw(4) << "vpp" << std::setw(12) << "schedule" << std::setw(5) << "mb"
     << std::setw(6) << "m" << std::setw(4) << "sp" << std::setw(11) << "recompute" << std::setw(20)
     << "sharding" << std::setw(10) << "mem GB" << std::setw(10) << "step s" << std::setw(8)
     << "MFU %" << std::setw(12) << "tokens/s"
     << "\n";
  for (size_t i = 0; i < result.fitting.size() && i < top; ++i) {
    const PlanReport& p = result.fitting[i];
    const Layout& l = p.layout;
    os << std::setw(4) << i + 1 << std::setw(4) << l.tp << std::setw(4) << l.pp << std::setw(6)
       << l.dp << std::setw(14)
       << (l.cp > 1 ? concat(l.cp, " ", config::option_name(l.cp_comm)) : std::string("1"))
       << std::setw(4) << l.ep << std::setw(4) << l.expert_tp() << std::setw(4) << l.vpp
       << std::setw(12) << (l.pp > 1 ? config::option_name(l.schedule) : std::string_view("-"))
       << std::setw(5) << l.micro_batch << std::setw(6) << l.num_microbatches << std::setw(4)
       << (l.sequence_parallel ? "on" : "-") << std::setw(11) << config::option_name(l.recompute)
       << std::setw(20) << sharding_name(l) << std::setw(10) << gb(p.memory().total, 2)
       << std::setw(10) << std::setprecision(4) << p.time.step << std::setw(8) << std::fixed
       << std::setprecision(1) << p.time.mfu * 100 << std::setw(12) << std::setprecision(0)
       << p.time.tokens_per_second << std::defaultfloat << "\n";
  }
  return os.str();
}

}  // namespace megatron::planning
