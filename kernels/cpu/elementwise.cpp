#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

using detail::from_f32;
using detail::kParallelGrain;
using detail::to_f32;

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(to_f32(a[i]) + to_f32(b[i]));
}

template <typename A, typename X>
void add_inplace(A* acc, const X* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) acc[i] = from_f32<A>(to_f32(acc[i]) + to_f32(x[i]));
}

template <typename T>
void scale_inplace(T* x, float s, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] = from_f32<T>(to_f32(x[i]) * s);
}

void fill(float* x, float value, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

// The activations cost ~10x a plain add per element, so they go parallel at a smaller size.
constexpr int64_t kActivationGrain = kParallelGrain / 8;

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, math::Gelu kind) {
  if (kind == math::Gelu::Erf) {
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(math::gelu_erf(to_f32(x[i])));
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T>(math::gelu_tanh(to_f32(x[i])));
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, int64_t n, math::Gelu kind) {
  if (kind == math::Gelu::Erf) {
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
    for (int64_t i = 0; i < n; ++i)
      dx[i] = from_f32<T>(to_f32(dy[i]) * math::gelu_erf_grad(to_f32(x[i])));
    return;
  }
#pragma omp parallel for simd schedule(static) if (n > kActivationGrain)
  for (int64_t i = 0; i < n; ++i)
    dx[i] = from_f32<T>(to_f32(dy[i]) * math::gelu_tanh_grad(to_f32(x[i])));
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

namespace {
// The gated linear unit row by row with the element function a compile-time functor, so that
// the plain units' loops vectorize (a branch per element would not): forward y = f(gate, up);
// backward f(gate, up, dy, dgate, dup).
template <typename T, typename Elem>
void glu_rows_forward(const T* x, T* y, int64_t rows, int64_t F, Elem f) {
#pragma omp parallel for schedule(static) if (rows * F > kActivationGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* gate = x + r * 2 * F;
    const T* up = gate + F;
    T* yr = y + r * F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) yr[j] = from_f32<T>(f(to_f32(gate[j]), to_f32(up[j])));
  }
}

template <typename T, typename Elem>
void glu_rows_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, Elem f) {
#pragma omp parallel for schedule(static) if (rows * F > kActivationGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const T* gate = x + r * 2 * F;
    const T* up = gate + F;
    const T* dyr = dy + r * F;
    T* dgate = dx + r * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int64_t j = 0; j < F; ++j) {
      float dg, du;
      f(to_f32(gate[j]), to_f32(up[j]), to_f32(dyr[j]), dg, du);
      dgate[j] = from_f32<T>(dg);
      dup[j] = from_f32<T>(du);
    }
  }
}

// act(gate) * up and its gradients, act a compile-time functor.
template <typename T, typename Act>
void plain_glu_forward(const T* x, T* y, int64_t rows, int64_t F, Act act) {
  glu_rows_forward(x, y, rows, F, [=](float g, float u) { return act(g) * u; });
}

template <typename T, typename Act, typename Grad>
void plain_glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, Act act,
                        Grad grad) {
  glu_rows_backward(x, dy, dx, rows, F, [=](float g, float u, float d, float& dg, float& du) {
    dg = d * u * grad(g);
    du = d * act(g);
  });
}

// The clamped, offset unit (math::Glu not plain): the gate's activation a runtime choice.
template <typename T>
void clamped_glu_forward(const T* x, T* y, int64_t rows, int64_t F, const math::Glu& glu) {
  glu_rows_forward(x, y, rows, F, [=](float g, float u) { return math::glu_value(g, u, glu); });
}

template <typename T>
void clamped_glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F,
                          const math::Glu& glu) {
  glu_rows_backward(x, dy, dx, rows, F, [=](float g, float u, float d, float& dg, float& du) {
    math::glu_grads(g, u, d, glu, dg, du);
  });
}
}  // namespace

template <typename T>
void glu_forward(const T* x, T* y, int64_t rows, int64_t F, math::Glu glu) {
  if (!glu.plain())
    clamped_glu_forward(x, y, rows, F, glu);
  else if (glu.gate == math::GluGate::Silu)
    plain_glu_forward(x, y, rows, F, [](float v) { return math::silu(v); });
  else if (glu.gate == math::GluGate::GeluTanh)
    plain_glu_forward(x, y, rows, F, [](float v) { return math::gelu_tanh(v); });
  else
    plain_glu_forward(x, y, rows, F, [](float v) { return math::quick_gelu(v); });
}

template <typename T>
void glu_backward(const T* x, const T* dy, T* dx, int64_t rows, int64_t F, math::Glu glu) {
  if (!glu.plain())
    clamped_glu_backward(x, dy, dx, rows, F, glu);
  else if (glu.gate == math::GluGate::Silu)
    plain_glu_backward(
        x, dy, dx, rows, F, [](float v) { return math::silu(v); },
        [](float v) { return math::silu_grad(v); });
  else if (glu.gate == math::GluGate::GeluTanh)
    plain_glu_backward(
        x, dy, dx, rows, F, [](float v) { return math::gelu_tanh(v); },
        [](float v) { return math::gelu_tanh_grad(v); });
  else
    plain_glu_backward(
        x, dy, dx, rows, F, [](float v) { return math::quick_gelu(v); },
        [](float v) { return math::quick_gelu_grad(v); });
}

// The storage types the ops layer passes as stored: fp32, and bf16 (widened in registers).
#define MT_INSTANTIATE(T)                                                      \
  template void add<T>(const T*, const T*, T*, int64_t);                       \
  template void add_inplace<T, T>(T*, const T*, int64_t);                      \
  template void scale_inplace<T>(T*, float, int64_t);                          \
  template void gelu_forward<T>(const T*, T*, int64_t, math::Gelu);            \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, math::Gelu); \
  template void glu_forward<T>(const T*, T*, int64_t, int64_t, math::Glu);     \
  template void glu_backward<T>(const T*, const T*, T*, int64_t, int64_t, math::Glu);
MT_INSTANTIATE(float)
MT_INSTANTIATE(bf16_t)
#undef MT_INSTANTIATE
template void add_inplace<float, bf16_t>(float*, const bf16_t*, int64_t);

}  // namespace megatron::kernels::cpu
