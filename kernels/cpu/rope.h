#pragma once
// Rotary position embedding, Hugging Face "rotate half" layout: for each head vector of size Dh
// (rotary dims = Dh), pairs (i, i + Dh/2) rotate by angle pos * rope^(-2i/Dh).
// Applied in place to the query and key heads of a fused qkv buffer (layout as attention.h),
// at positions position_offset + s, or at positions[s * B + b] when `positions` ([S, B] int32,
// e.g. restarting at 0 for each packed document) is given. Backward rotates the gradient by the
// inverse angle.
#include <cstdint>

#include "kernels/common/numeric.h"
#include "kernels/cpu/attention.h"

namespace megatron::kernels::cpu {

void rope_forward(const AttentionShape& shape, float* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions = nullptr);
void rope_backward(const AttentionShape& shape, float* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions = nullptr);

}  // namespace megatron::kernels::cpu
