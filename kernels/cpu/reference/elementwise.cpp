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
  const double u = kSqrt2OverPi * (g + 0.044715 * g * g * g);
  return 0.5 * g * (1.0 + std::tanh(u));
}
double glu_act_grad(double g, math::GluGate gate) {
  if (gate == math::GluGate::Silu) {
    const double s = sigmoid(g);
    return s + g * s * (1.0 - s);
  }
  const double u = kSqrt2OverPi * (g + 0.044715 * g * g * g);
  const double du = kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * g * g);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * du;
}
}  // namespace

void glu_forward(const float* x, float* y, int64_t rows, int64_t F, math::GluGate gate) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double g = x[r * 2 * F + j], up = x[r * 2 * F + F + j];
      y[r * F + j] = float(glu_act(g, gate) * up);
    }
  }
}

void glu_backward(const float* x, const float* dy, float* dx, int64_t rows, int64_t F,
                  math::GluGate gate) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < F; ++j) {
      const double g = x[r * 2 * F + j], up = x[r * 2 * F + F + j], d = dy[r * F + j];
      dx[r * 2 * F + j] = float(d * up * glu_act_grad(g, gate));
      dx[r * 2 * F + F + j] = float(d * glu_act(g, gate));
    }
  }
}

}  // namespace megatron::kernels::ref
