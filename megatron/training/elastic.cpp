#include "megatron/training/elastic.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "megatron/core/error.h"
#include "megatron/planning/planner.h"

namespace megatron::training {
namespace {

bool fits_world(const config::Recipe& recipe, int64_t world) {
  try {
    recipe.validate_for_world(world);
    return true;
  } catch (const InputError&) {
    return false;
  }
}

// The node counts of [min, max] whose world (at this job's ranks per node) the recipe fits.
std::string fitting_node_counts(const config::Recipe& recipe, int64_t ranks_per_node) {
  const config::ElasticConfig& e = recipe.cluster.elastic;
  std::ostringstream s;
  for (int64_t n = e.min_nodes; n <= e.max_nodes; ++n)
    if (fits_world(recipe, n * ranks_per_node)) s << (s.tellp() > 0 ? ", " : "") << n;
  return s.tellp() > 0 ? s.str() : "none";
}

}  // namespace

void fit_recipe_to_world(config::Recipe& recipe, const parallel::LaunchInfo& launch,
                         std::ostream& out) {
  const config::ElasticConfig& e = recipe.cluster.elastic;
  if (!e.enabled()) return;
  const int64_t nodes = launch.num_nodes, world = launch.world_size;
  MT_INPUT_CHECK(nodes >= e.min_nodes && nodes <= e.max_nodes, recipe.source_path,
                 ": cluster.elastic: the job runs on ", nodes, " node(s), outside [min_nodes ",
                 e.min_nodes, ", max_nodes ", e.max_nodes, "]");
  config::ParallelConfig& p = recipe.parallel;
  const int64_t model_ranks = p.tensor * p.pipeline * p.context;
  if (p.data != 0 && world % model_ranks == 0 && p.data != world / model_ranks) {
    out << "elastic: parallel.data " << p.data << " -> " << world / model_ranks << " (" << world
        << " ranks on " << nodes << " node(s); tensor * pipeline * context = " << model_ranks
        << ")\n";
    p.data = 0;
  }
  const int64_t ranks_per_node = nodes > 0 && world % nodes == 0 ? world / nodes : 0;
  if (!fits_world(recipe, world) && ranks_per_node > 0) {
    try {
      recipe.validate_for_world(world);
    } catch (const InputError& err) {
      throw InputError(concat(err.what(), "\n", recipe.source_path, ": cluster.elastic: no layout ",
                              "keeps tp/pp/cp/ep and the global batch on ", nodes, " node(s) x ",
                              ranks_per_node, " ranks; node counts in [", e.min_nodes, ", ",
                              e.max_nodes,
                              "] that fit: ", fitting_node_counts(recipe, ranks_per_node)));
    }
  }
}

void check_elastic_device_fit(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                              int64_t tokenizer_vocab) {
  if (!recipe.cluster.elastic.enabled() || recipe.cluster.gpu_memory_gb <= 0 ||
      recipe.training.device != config::TrainingDevice::CUDA || launch.num_nodes < 1)
    return;
  planning::ClusterSpec cluster = planning::cluster_from_recipe(recipe);
  cluster.nodes = launch.num_nodes;
  cluster.gpus_per_node = std::max(1, launch.world_size / launch.num_nodes);
  planning::PlanReport plan;
  try {
    plan = planning::plan(recipe, cluster, tokenizer_vocab);
  } catch (const InputError&) {
    return;  // a layout the planner does not model: the trainer's own checks decide
  }
  if (plan.fits) return;
  const auto gib = [](double b) { return b / double(1ull << 30); };
  throw InputError(concat(
      recipe.source_path, ": cluster.elastic: on ", launch.num_nodes, " node(s) (data parallel ",
      plan.layout.dp, ") the planner estimates ", gib(plan.memory().total),
      " GiB per GPU, more than cluster.gpu_memory_gb ", recipe.cluster.gpu_memory_gb,
      " GB: raise cluster.elastic.min_nodes or shard more "
      "(parallel.data_parallel_sharding_strategy); build/bin/plan --recipe shows the estimate"));
}

std::string describe_layout_change(const nlohmann::json& saved, const RunLayout& now) {
  const auto get = [&](const char* key) {
    return saved.contains(key) && saved[key].is_number_integer() ? saved[key].get<int64_t>() : 0;
  };
  const int64_t tp = get("tp"), pp = get("pp"), dp = get("dp");
  if (dp <= 0 || (tp == now.tp && pp == now.pp && dp == now.dp)) return "";
  const auto micro = [&](int64_t d) { return now.global_batch / (now.micro_batch * d); };
  std::ostringstream s;
  s << "resharded resume: the checkpoint was saved by tp " << tp << " pp " << pp << " dp " << dp;
  if (now.global_batch % (now.micro_batch * dp) == 0)
    s << " (" << micro(dp) << " micro-batch(es) per step)";
  s << ", this run is tp " << now.tp << " pp " << now.pp << " dp " << now.dp << " ("
    << micro(now.dp) << " micro-batch(es) per step); global batch " << now.global_batch
    << " kept, optimizer state resharded";
  return s.str();
}

}  // namespace megatron::training
