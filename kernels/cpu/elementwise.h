#pragma once
// Element-wise ops: residual adds, scaling, GELU (tanh) and SwiGLU.
// The templates take T = float or bf16_t (instantiated in elementwise.cpp): bf16 elements are
// widened in registers, computed in fp32 and rounded once (round to nearest even), the same
// values as widening whole tensors first, without the fp32 copies' memory traffic.
#include <cstdint>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cpu {

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);  // out = a + b
template <typename A, typename X>
void add_inplace(A* acc, const X* x, int64_t n);  // acc += x (A = X, or fp32 acc of bf16 x)
template <typename T>
void scale_inplace(T* x, float s, int64_t n);  // x *= s
void fill(float* x, float value, int64_t n);

// GELU, tanh-approximated or exact (math::Gelu)
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, math::Gelu kind = math::Gelu::Tanh);
// dx = dy * gelu'(x)   (activation grads are written, not accumulated)
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, math::Gelu kind = math::Gelu::Tanh);

// tanh (the BERT pooler): y = tanh(x); backward from the output: dx = dy * (1 - y^2) (dx may be
// dy).
void tanh_forward(const float* x, float* y, int64_t n);
void tanh_backward(const float* y, const float* dy, float* dx, int64_t n);

// Number of elements with !(|x| <= limit): beyond the limit or not finite (fp16 overflow check).
int64_t count_outside(const float* x, int64_t n, float limit);

// Gated linear unit over rows: x is [rows, 2F] = [gate | up]; y[rows, F] = act(gate) * up
// (SwiGLU: silu; GeGLU: tanh GELU; quick GELU), with math::Glu's clamps and offset.
template <typename T>
void glu_forward(const T* x, T* y, int64_t rows, int64_t F, math::Glu glu);
template <typename T>
void glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, math::Glu glu);

}  // namespace megatron::kernels::cpu
