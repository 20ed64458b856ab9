#pragma once
// A host fp32 tensor of standard-normal values from a seeded generator (layer tests' inputs).
#include <cstdint>
#include <random>

#include "megatron/core/tensor.h"

namespace megatron::testing {

inline Tensor random_tensor(const Shape& shape, uint32_t seed) {
  Tensor t = Tensor::empty(shape, DType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

}  // namespace megatron::testing
