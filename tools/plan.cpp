// plan: memory / throughput planner for a recipe on a cluster (megatron/planning/planner.h; flags
// in tools/plan_cli.h).
//   build/bin/plan --recipe recipes/gpt2_124m.yaml [--nodes N --gpus-per-node G
//                  --gpu-memory 80GB --gpu-tflops 989] [--search [--top 10]] [--json]
#include <iostream>
#include <string>
#include <vector>

#include "tools/plan_cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return megatron::planning::run_plan_cli(args, std::cout, std::cerr);
}
