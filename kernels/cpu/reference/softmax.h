#pragma once
// Naive reference of kernels/cpu/softmax.h (double; an all -inf row gives zeros).
#include <cstdint>

namespace megatron::kernels::ref {

void softmax_forward(const float* x, float* y, int64_t rows, int64_t L, float scale);
void softmax_backward(const float* y, const float* dy, float* dx, int64_t rows, int64_t L,
                      float scale);

}  // namespace megatron::kernels::ref
