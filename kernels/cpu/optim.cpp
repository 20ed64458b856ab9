#include "kernels/cpu/optim.h"

#include <vector>

#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p) {
  const math::AdamWParams hp = p;  // by value: the loop must not reload it through a pointer
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) math::adamw_update(param[i], grad[i], m[i], v[i], hp);
}

double sum_squares(const float* x, int64_t n) {
  // Fixed chunks whose partial sums are added in chunk order: the same result for any thread
  // count (gradient-norm clipping must not depend on OMP_NUM_THREADS).
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = (c + 1) * kChunk < n ? (c + 1) * kChunk : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = c * kChunk; i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace megatron::kernels::cpu
