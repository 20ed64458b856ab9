#pragma once
// Naive reference of kernels/cpu/rope.h. The angles come from math::rope_inv_freq (their
// definition, shared with the kernels); the rotation is done in double.
#include <cstdint>

#include "kernels/common/numeric.h"
#include "kernels/cpu/attention.h"

namespace megatron::kernels::ref {

void rope_forward(const AttentionShape& shape, float* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions = nullptr);
void rope_backward(const AttentionShape& shape, float* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions = nullptr);

}  // namespace megatron::kernels::ref
