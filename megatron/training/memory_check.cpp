#include "megatron/training/memory_check.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "megatron/core/error.h"
#include "megatron/planning/planner.h"

namespace megatron::training {

double host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024.0;
  return 0.0;
}

void check_host_memory_fits(const config::Recipe& recipe, int64_t tokenizer_vocab, Device device) {
  // A device reports its own allocation failures; on one, only the optimizer's offloaded share
  // (optimizer.offload: cpu) lives in host memory.
  const bool offload =
      device != Device::CPU && recipe.optimizer.offload != config::OptimizerOffload::None;
  if (device != Device::CPU && !offload) return;
  const double available = host_available_bytes();
  if (available <= 0) return;
  // This run's world (the recipe is resolved for it), whatever cluster the recipe was written for.
  planning::ClusterSpec cluster = planning::cluster_from_recipe(recipe);
  const auto& p = recipe.parallel;
  cluster.nodes = 1;
  cluster.gpus_per_node = p.tensor * p.pipeline * p.context * std::max<int64_t>(p.data, 1);
  planning::PlanReport plan;
  try {
    plan = planning::plan(recipe, cluster, tokenizer_vocab);
  } catch (const InputError&) {
    return;  // a layout the planner does not model: the trainer's own checks decide
  }
  const planning::MemoryBreakdown& m = plan.memory();
  auto gib = [](double b) { return concat(b / double(1ull << 30), " GiB"); };
  if (offload) {
    if (m.host_offloaded <= available) return;
    throw InputError(concat(
        recipe.source_path, ": optimizer.offload: cpu keeps about ", gib(m.host_offloaded),
        " of fp32 master weights and optimizer state per rank in host memory, more than the ",
        gib(available), " this machine has available; lower optimizer.offload_fraction (",
        recipe.optimizer.offload_fraction,
        ") or shard the optimizer over more ranks (parallel.data_parallel_sharding_strategy)"));
  }
  if (m.total <= available) return;
  // The model's state as the sharding strategy keeps it (the scratch and gathered units too).
  const double state =
      m.weights + m.master + m.gradients + m.optimizer + m.grad_scratch + m.sharding_transient;
  const bool activations = m.activations > state;
  throw InputError(concat(
      recipe.source_path, ": this run needs about ", gib(m.total),
      " per rank (weights, gradients "
      "and optimizer state ",
      gib(state), ", activations ", gib(m.activations), "), more than the ", gib(available),
      " this machine has available; ",
      activations ? "the activations are sized by training.micro_batch_size (" +
                        std::to_string(recipe.training.micro_batch_size) +
                        ") and model.seq_length (" + std::to_string(recipe.model.seq_length) + ")"
                  : "the parameters (" + std::to_string(plan.params.total) +
                        ") are sized by model.hidden_size (" +
                        std::to_string(recipe.model.hidden_size) + "), model.num_layers (" +
                        std::to_string(recipe.model.num_layers) + ") and the vocabulary",
      " (build/bin/plan --recipe shows the whole estimate)"));
}

}  // namespace megatron::training
