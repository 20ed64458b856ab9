#pragma once
// Bulk fp32 <-> bf16 conversion (round to nearest even, NaN kept quiet: math::float_to_bf16_bits
// element for element), written so the compiler vectorizes it; ops::cast's CPU path.
#include <cstdint>

#include "megatron/core/dtype.h"

namespace megatron::kernels::cpu {

void bf16_to_f32(const bf16_t* in, float* out, int64_t n);
void f32_to_bf16(const float* in, bf16_t* out, int64_t n);

}  // namespace megatron::kernels::cpu
