#pragma once
// Shared by the decoder model tests (test_gpt_model, test_moe_model, test_recompute_models): a
// micro-batch of random token ids and labels below `vocab`, from mt19937(seed).
#include <cstdint>
#include <random>

#include "models/model.h"

namespace megatron::models::testing {

inline MicroBatch random_decoder_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed,
                                       MicroBatchInfo info) {
  std::mt19937 rng(seed);
  MicroBatch mb;
  mb.tokens = Tensor::empty({S, B}, DType::I32);
  mb.labels = Tensor::empty({S, B}, DType::I32);
  for (int64_t i = 0; i < S * B; ++i) {
    mb.tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
    mb.labels.data<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  }
  mb.info = info;
  return mb;
}

}  // namespace megatron::models::testing
