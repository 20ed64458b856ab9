#pragma once
// Row softmax: y[r, :] = softmax(scale * x[r, :]) over rows of length L.
#include <cstdint>

namespace megatron::kernels::cpu {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t L, float scale);
// dx = scale * y * (dy - sum(dy * y))
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t L,
                      float scale);

}  // namespace megatron::kernels::cpu
