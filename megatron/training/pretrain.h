#pragma once
// A pretraining run from a loaded recipe, in order: the mesh and its process groups (placed by
// node; NCCL groups on CUDA), the GPU of this rank, the CPU threads, the tokenizer and data, the
// trainer, and the run. tools/pretrain.cpp parses the flags and calls it.
#include <ostream>

#include "megatron/config/recipe.h"
#include "megatron/parallel/launch.h"

namespace megatron::training {

// `out`: world rank 0's stdout (a null stream elsewhere). Returns the process exit code.
int run_pretraining(config::Recipe recipe, const parallel::LaunchInfo& launch, std::ostream& out);

}  // namespace megatron::training
