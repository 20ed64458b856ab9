#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t L, float scale) {
#pragma omp parallel for schedule(static) if (rows * L > detail::kParallelGrain / 4)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * L;
    float* yr = y + r * L;
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) yr[j] = scale * xr[j];
    const float mx = detail::max_of(yr, L);
    if (mx == -std::numeric_limits<float>::infinity()) {  // every entry -inf: no mass anywhere
      std::fill(yr, yr + L, 0.0f);
      continue;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < L; ++j) {
      yr[j] = math::exp_approx(yr[j] - mx);
      sum += yr[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) yr[j] *= inv;
  }
}

void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t L,
                      float scale) {
#pragma omp parallel for schedule(static) if (rows * L > detail::kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * L;
    const float* dyr = dy + r * L;
    float* dxr = dx + r * L;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < L; ++j) dot += dyr[j] * yr[j];
#pragma omp simd
    for (int64_t j = 0; j < L; ++j) dxr[j] = scale * yr[j] * (dyr[j] - dot);
  }
}

}  // namespace megatron::kernels::cpu
