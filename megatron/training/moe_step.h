#pragma once
// The MoE parts of a training step after backward: routing statistics reduced over the ranks
// that hold tokens of the global batch, the aux-loss-free expert-bias update
// (bias += rate * sign(mean - count) per layer, from the global batch's counts) and the step's
// MoE metrics.
#include "megatron/parallel/communicator.h"
#include "megatron/training/metrics.h"
#include "megatron/transformer/moe/moe_spec.h"

namespace megatron::training {

struct MoeStepGroups {
  parallel::Communicator* tp;  // summed over only with sequence parallelism (token slices)
  parallel::Communicator* dp;  // every data-parallel rank's micro-batches (ep is part of dp)
  parallel::Communicator* pp;  // the stages hold different layers
  parallel::Communicator* cp = nullptr;  // context parallel: each rank holds part of the tokens
  bool sequence_parallel = false;
  int64_t num_layers = 0;       // the model's (for the per-layer imbalance list)
  Device device = Device::CPU;  // the training device: its groups move device tensors only
};

// Reads and clears the layers' statistics of the step; updates the expert bias when enabled;
// fills m.moe_* (the same on every rank). micro_batches: of the whole global batch.
void finish_moe_step(moe::MoeState& state, const MoeStepGroups& g, int64_t micro_batches,
                     StepMetrics& m);

}  // namespace megatron::training
