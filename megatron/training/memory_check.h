#pragma once
// Refuses, before anything is allocated, a run whose model cannot fit: the planner's memory
// model of this implementation (megatron/planning) gives the bytes one rank needs (weights,
// master weights, gradients, optimizer state, activations, workspace); on the CPU they are
// compared with the host's available memory, on a GPU the optimizer state offloaded to the host
// (optimizer.offload: cpu) is. An InputError names the largest part and the
// recipe keys that size it, instead of an allocation failure deep in the model.
#include <cstdint>

#include "megatron/config/recipe.h"
#include "megatron/core/tensor.h"

namespace megatron::training {

void check_host_memory_fits(const config::Recipe& recipe, int64_t tokenizer_vocab, Device device);
// MemAvailable of /proc/meminfo in bytes (0 when unknown).
double host_available_bytes();

}  // namespace megatron::training
