#include "kernels/cpu/reference/optim.h"

namespace megatron::kernels::ref {

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p) {
  for (int64_t i = 0; i < n; ++i) math::adamw_update(param[i], grad[i], m[i], v[i], p);
}

double sum_squares(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
}

}  // namespace megatron::kernels::ref
