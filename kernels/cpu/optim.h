#pragma once
// Optimizer kernels over flat fp32 arrays.
#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p);

// Sum of squares with double accumulation (combine across tensors/ranks, then sqrt).
double sum_squares(const float* x, int64_t n);

}  // namespace megatron::kernels::cpu
