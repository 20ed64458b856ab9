#include "kernels/cpu/reference/elementwise.h"

#include <cmath>

namespace megatron::kernels::ref {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)

double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3 * 0.044715 * x * x);
}
double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
         x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

void add(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
void add_inplace(float* acc, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}
void scale_inplace(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}
void fill(float* x, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

void gelu_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(gelu(x[i]));
}
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = float(dy[i] * gelu_grad(x[i]));
}
void gelu_erf_forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(gelu_erf(x[i]));
}
void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = float(dy[i] * gelu_erf_grad(x[i]));
}

namespace {
// The gate activation and its derivative in double.
double glu_act(double g, math::GluGate gate) {
  if (gate == math::GluGate::Silu) return g * sigmoid(g);
  if (gate == math::GluGate::QuickGelu) return g * sigmoid(1.702 * g);
  const double u = kSqrt2OverPi * (g + 0.044715 * g * g * g);
  return 0.5 * g * (1.0 + std::tanh(u));
}
double glu_act_grad(double g, math::GluGate gate) {
  if (gate == math::GluGate::Silu) {
    const double s = sigmoid(g);
    return s + g * s * (1.0 - s);
  }
  if (gate == math::GluGate::QuickGelu) {
    const double s = sigmoid(1.702 * g);
    return s + 1.702 * g * s * (1.0 - s);
  }
  const double u = kSqrt2OverPi * (g + 0.044715 * g * g * g);
  const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * g * g);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * du;
}
}  // namespace

void glu_forward(const float* x, float* y, int64_t rows, int64_t F, math::Glu glu) {
  const double lim = glu.limit;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      double g = x[r * 2 * F + j], up = x[r * 2 * F + F + j];
      if (lim > 0) g = std::min(g, lim), up = std::max(-lim, std::min(up, lim));
      y[r * F + j] = float(glu_act(g, glu.gate) * (up + glu.offset));
    }
  }
}

void glu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t F,
                  math::Glu glu) {
  const double lim = glu.limit;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double g0 = x[r * 2 * F + j], up0 = x[r * 2 * F + F + j], d = dy[r * F + j];
      double g = g0, up = up0, pass_g = 1, pass_up = 1;
      if (lim > 0) {
        g = std::min(g0, lim), up = std::max(-lim, std::min(up0, lim));
        pass_g = g0 <= lim ? 1 : 0;
        pass_up = std::abs(up0) <= lim ? 1 : 0;
      }
      dx[r * 2 * F + j] = float(d * (up + glu.offset) * glu_act_grad(g, glu.gate) * pass_g);
      dx[r * 2 * F + F + j] = float(d * glu_act(g, glu.gate) * pass_up);
    }
  }
}

}  // namespace megatron::kernels::ref
