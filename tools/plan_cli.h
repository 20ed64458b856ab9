#pragma once
// The plan tool's command line (tools/plan.cpp is its main): flags, the recipe's vocabulary, and
// the planner's report or search (megatron/planning/planner.h).
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace megatron::planning {

struct PlanArgs {
  std::string recipe;
  std::vector<std::string> overrides;  // --set
  std::optional<int64_t> nodes, gpus_per_node, vocab;
  std::optional<double> gpu_memory_bytes, gpu_tflops, intra_node_gbps, inter_node_gbps, efficiency;
  bool flash_attention = true;
  bool search = false, json = false, help = false;
  int64_t top = 10;
};

// "80GB" / "80G" (1e9), "80GiB" (2^30), "512MB", "1.5TB", "80" (GB) -> bytes. Throws InputError.
double parse_memory_size(const std::string& text);
// Throws InputError naming the flag and the bad value.
PlanArgs parse_plan_args(const std::vector<std::string>& args);
std::string plan_usage();
// The whole tool: returns the exit code (0 fits, 1 usage/input error, 3 does not fit / nothing
// fits). Reports go to `out`, errors to `err`.
int run_plan_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace megatron::planning
