#pragma once
// Element-wise ops: residual adds, scaling, GELU (tanh) and SwiGLU.
#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cpu {

void add(const float* a, const float* b, float* out, int64_t n);  // out = a + b
void add_inplace(float* acc, const float* x, int64_t n);          // acc += x
void scale_inplace(float* x, float s, int64_t n);                 // x *= s
void fill(float* x, float value, int64_t n);

// GELU, tanh-approximated or exact (math::Gelu)
void gelu_forward(const float* x, float* y, int64_t n, math::Gelu kind = math::Gelu::Tanh);
// dx = dy * gelu'(x)   (activation grads are written, not accumulated)
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n,
                   math::Gelu kind = math::Gelu::Tanh);

// tanh (the BERT pooler): y = tanh(x); backward from the output: dx = dy * (1 - y^2) (dx may be
// dy).
void tanh_forward(const float* x, float* y, int64_t n);
void tanh_backward(const float* y, const float* dy, float* dx, int64_t n);

// Number of elements with !(|x| <= limit): beyond the limit or not finite (fp16 overflow check).
int64_t count_outside(const float* x, int64_t n, float limit);

// SwiGLU over rows: x is [rows, 2F] = [gate | up]; y[rows, F] = silu(gate) * up.
void swiglu_forward(const float* x, float* y, int64_t rows, int64_t F);
void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t F);

}  // namespace megatron::kernels::cpu
