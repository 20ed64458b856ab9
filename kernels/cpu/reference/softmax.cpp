#include "kernels/cpu/reference/softmax.h"

#include <cmath>
#include <limits>

namespace megatron::kernels::ref {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t L, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < L; ++j) mx = std::fmax(mx, double(scale) * x[r * L + j]);
    if (mx == -std::numeric_limits<double>::infinity()) {
      for (int64_t j = 0; j < L; ++j) y[r * L + j] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < L; ++j) sum += std::exp(double(scale) * x[r * L + j] - mx);
    for (int64_t j = 0; j < L; ++j)
      y[r * L + j] = float(std::exp(double(scale) * x[r * L + j] - mx) / sum);
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t L,
                      float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (int64_t j = 0; j < L; ++j) dot += double(dy[r * L + j]) * y[r * L + j];
    for (int64_t j = 0; j < L; ++j)
      dx[r * L + j] = float(double(scale) * y[r * L + j] * (dy[r * L + j] - dot));
  }
}

}  // namespace megatron::kernels::ref
