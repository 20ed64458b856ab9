#pragma once
// The process groups training uses (from the mesh; all of size one for a single process).
#include "megatron/parallel/communicator.h"

namespace megatron::training {

struct TrainerGroups {
  parallel::Communicator* world;
  parallel::Communicator* tp;
  parallel::Communicator* dp;
  parallel::Communicator* pp = nullptr;
  parallel::Communicator* embedding = nullptr;  // first + last pipeline stage
  parallel::Communicator* model = nullptr;      // tp x pp (gradient norm)
};

}  // namespace megatron::training
