#pragma once
// Elastic restarts (cluster.elastic): a job restarted on another node count keeps the recipe's
// tensor/pipeline/context/expert sizes and lets data parallelism take the ranks it was given;
// the global batch stays, gradient accumulation changes, the checkpoint is resharded on load
// (training/checkpointer.h) and the sampler continues at the consumed samples (sampler.h).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/parallel/launch.h"

namespace megatron::training {

// With cluster.elastic: checks the job's node count against [min_nodes, max_nodes] and replaces a
// stated parallel.data that no longer matches the world (a line in `out` says so). Without it
// the recipe is left as it is. Either way an InputError names the keys when no layout fits the
// world, with the node counts in range that would fit.
void fit_recipe_to_world(config::Recipe& recipe, const parallel::LaunchInfo& launch,
                         std::ostream& out);

// With cluster.elastic, training on CUDA and cluster.gpu_memory_gb stated: the planner's memory
// estimate of this world's layout must fit one device, else an InputError names the node count
// and the keys (before any weight is allocated).
void check_elastic_device_fit(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                              int64_t tokenizer_vocab);

// The layout a checkpoint was saved with (its metadata's "layout") against this run's:
// "" when tp, pp and dp are the same, else one line naming both layouts, the micro-batches per
// step of each and the global batch kept.
struct RunLayout {
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t global_batch = 1, micro_batch = 1;
};
std::string describe_layout_change(const nlohmann::json& saved_layout, const RunLayout& now);

}  // namespace megatron::training
