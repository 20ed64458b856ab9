#pragma once
// The vocabulary columns a rank's logits hold (vocab-parallel cross entropy), shared by the CPU
// and CUDA cross-entropy kernels (kernels/cpu/cross_entropy.h).
#include <cstdint>

namespace megatron::kernels {

struct VocabSlice {
  int64_t V_local;
  int64_t vocab_start = 0;
  int64_t valid_vocab;  // global count of real (non-padding) tokens
};

}  // namespace megatron::kernels
