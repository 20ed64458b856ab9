#include "kernels/cpu/reference/dropout.h"

#include "kernels/common/philox.h"

namespace megatron::kernels::ref {
namespace {

void apply(const float* in, float* out, int64_t n, float p, uint64_t seed, uint64_t stream,
           uint64_t index_offset) {
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = philox::uniform(seed, stream, index_offset + uint64_t(i)) >= p;
    out[i] = keep ? float(double(in[i]) / (1.0 - double(p))) : 0.0f;
  }
}

}  // namespace

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  apply(x, y, n, p, seed, stream, index_offset);
}

void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t index_offset) {
  apply(dy, dx, n, p, seed, stream, index_offset);
}

}  // namespace megatron::kernels::ref
