#pragma once
// Naive reference of kernels/cpu/elementwise.h: GELU and SiLU from their textbook formulas in
// double, independent of kernels/common/numeric.h's formulas (it names the GLU gate only).
#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::ref {

void add(const float* a, const float* b, float* out, int64_t n);
void add_inplace(float* acc, const float* x, int64_t n);
void scale_inplace(float* x, float s, int64_t n);
void fill(float* x, float value, int64_t n);
void gelu_forward(const float* x, float* y, int64_t n);
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);
// The exact GELU, x Phi(x), through std::erf in double.
void gelu_erf_forward(const float* x, float* y, int64_t n);
void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n);
// Gated linear units in double: SwiGLU (silu gate), GeGLU (tanh-GELU gate, through std::tanh)
// or quick GELU, with math::Glu's clamps (gradient passed within the bounds, included) and
// offset.
void glu_forward(const float* x, float* y, int64_t rows, int64_t F, math::Glu glu);
void glu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t F,
                  math::Glu glu);

}  // namespace megatron::kernels::ref
