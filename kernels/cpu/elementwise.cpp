#include "kernels/cpu/elementwise.h"

#include <cmath>

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

using detail::kParallelGrain;

void add(const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void add_inplace(float* acc, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void scale_inplace(float* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void fill(float* x, float value, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// The activations cost ~10x a plain add per element, so they go parallel at a smaller size.
constexpr int64_t kActivationGrain = kParallelGrain / 8;

void gelu_forward(const float* x, float* y, int64_t n, math::Gelu kind) {
  if (kind == math::Gelu::Erf) {
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = math::gelu_erf(x[i]);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = math::gelu_tanh(x[i]);
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, math::Gelu kind) {
  if (kind == math::Gelu::Erf) {
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * math::gelu_erf_grad(x[i]);
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * math::gelu_tanh_grad(x[i]);
}

// Small ([B, D] pooler) and scalar on purpose: libm's tanhf, element by element.
void tanh_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
}

int64_t count_outside(const float* x, int64_t n, float limit) {
  int64_t count = 0;
#pragma omp parallel for reduction(+ : count) schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) count += !(std::abs(x[i]) <= limit);
  return count;
}

void swiglu_forward(const float* x, float* y, int64_t rows, int64_t F) {
#pragma omp parallel for schedule(static) if (rows * F > kActivationGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * F;
    const float* up = gate + F;
    float* yr = y + r * F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) yr[j] = math::silu(gate[j]) * up[j];
  }
}

void swiglu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t F) {
#pragma omp parallel for schedule(static) if (rows * F > kActivationGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = x + r * 2 * F;
    const float* up = gate + F;
    const float* dyr = dy + r * F;
    float* dgate = dx + r * 2 * F;
    float* dup = dgate + F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      dgate[j] = dyr[j] * up[j] * math::silu_grad(gate[j]);
      dup[j] = dyr[j] * math::silu(gate[j]);
    }
  }
}

}  // namespace megatron::kernels::cpu
