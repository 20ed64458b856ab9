#pragma once
// Naive reference of kernels/cpu/dropout.h: one philox::uniform call per element.
#include <cstdint>

namespace megatron::kernels::ref {

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset);
void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t index_offset);

}  // namespace megatron::kernels::ref
