#pragma once
// Reference of kernels/cpu/optim.h: AdamW element by element through the shared
// math::adamw_update (the definition; tests check it against hand-computed steps), and a plain
// double sum of squares.
#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::ref {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p);
double sum_squares(const float* x, int64_t n);

}  // namespace megatron::kernels::ref
