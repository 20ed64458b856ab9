// pretrain --recipe R.yaml [--set section.key=value ...] [--print-recipe]
// Parses the flags, loads and validates the recipe and runs it (megatron/training/pretrain.h).
#include "megatron/training/pretrain.h"

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "megatron/config/recipe.h"
#include "megatron/core/error.h"
#include "megatron/parallel/launch.h"
#include "megatron/parallel/mpi_communicator.h"

namespace {

using namespace megatron;

constexpr const char* kUsage =
    "usage: pretrain --recipe FILE.yaml [--set section.key=value ...] [--print-recipe]\n"
    "  --recipe FILE     the training recipe (YAML; may `extends:` another)\n"
    "  --set K=V         override a recipe key, e.g. --set training.train_iters=100\n"
    "  --print-recipe    print the resolved recipe and exit\n";

struct Args {
  std::string recipe;
  std::vector<std::string> overrides;
  bool print_only = false;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      MT_INPUT_CHECK(i + 1 < argc, "pretrain: ", flag, " needs a value\n", kUsage);
      return argv[++i];
    };
    if (arg == "--recipe") {
      a.recipe = value("--recipe");
    } else if (arg == "--set") {
      a.overrides.push_back(value("--set"));
    } else if (arg.rfind("--set=", 0) == 0) {
      a.overrides.push_back(arg.substr(6));
    } else if (arg == "--print-recipe") {
      a.print_only = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw InputError(concat("pretrain: unknown argument '", arg, "'\n", kUsage));
    }
  }
  MT_INPUT_CHECK(!a.recipe.empty(), "pretrain: --recipe is required\n", kUsage);
  return a;
}

// Discards output on ranks other than 0.
struct NullBuffer : std::streambuf {
  int overflow(int c) override { return c; }
};

// Flags and recipe, loaded on every rank without communicating. Every rank fails the same way
// on a bad one, so the ranks agree on it and exit cleanly with one message (from the lowest
// failing rank) instead of each printing it and aborting the job (Open MPI's MPI_ABORT banner
// and unpack noise).
std::optional<config::Recipe> load_or_agree_on_error(int argc, char** argv, Args& args,
                                                     const parallel::LaunchInfo& launch) {
  std::optional<config::Recipe> recipe;
  std::string error;
  try {
    args = parse_args(argc, argv);
    recipe = config::load_recipe(args.recipe, args.overrides);
  } catch (const InputError& e) {
    error = std::string("error: ") + e.what();
  }
  float first_bad =
      error.empty() ? static_cast<float>(launch.world_size) : static_cast<float>(launch.world_rank);
  if (launch.world_size > 1) {
    auto world = parallel::MpiCommunicator::world();
    Tensor t = Tensor::wrap(&first_bad, {1}, DType::F32);
    world->all_reduce(t, parallel::ReduceOp::Min);
  }
  if (first_bad < static_cast<float>(launch.world_size)) {
    if (launch.world_rank == static_cast<int>(first_bad)) std::cerr << error << "\n";
    return std::nullopt;
  }
  return recipe;
}

int run(const Args& args, config::Recipe recipe, const parallel::LaunchInfo& launch) {
  NullBuffer null_buffer;
  std::ostream null_stream(&null_buffer);
  std::ostream& out = launch.world_rank == 0 ? std::cout : null_stream;
  if (args.print_only) {  // the recipe as written: a cluster layout needs no cluster to print
    out << recipe.to_yaml();
    return 0;
  }
  return training::run_pretraining(std::move(recipe), launch, out);
}

}  // namespace

int main(int argc, char** argv) {
  int code = 0;
  std::string message;
  try {
    megatron::kernels::cpu::check_compiled_isa();  // before any kernel compiled for -march runs
    megatron::parallel::MpiRuntime mpi(&argc, &argv);
    const auto& launch = mpi.info();
    try {
      Args args;
      auto recipe = load_or_agree_on_error(argc, argv, args, launch);
      if (!recipe) return 1;
      return run(args, std::move(*recipe), launch);
    } catch (const megatron::InputError& e) {
      message = std::string("error: ") + e.what();
      code = 1;
    } catch (const std::exception& e) {
      message = std::string("fatal: ") + e.what();
      code = 2;
    }
    // A failure on one rank must not leave the others waiting in a collective (abort prints
    // the message with the rank).
    if (launch.world_size > 1) megatron::parallel::MpiRuntime::abort(code, message);
  } catch (const std::exception& e) {
    message = std::string("fatal: ") + e.what();
    code = 2;
  }
  std::cerr << message << "\n";
  return code;
}
