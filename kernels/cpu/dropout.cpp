#include "kernels/cpu/dropout.h"

#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {
namespace {

// out[i] = in[i] / (1 - p) where uniform(index_offset + i) >= p, else 0. Forward and backward
// are the same map (the mask scales the gradient exactly as it scaled the activation).
void apply_dropout(const float* in, float* out, int64_t n, float p, uint64_t seed, uint64_t stream,
                   uint64_t index_offset) {
  if (p <= 0.0f) {
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) out[i] = in[i];
    return;
  }
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  constexpr int64_t kTile = 1024;  // uniforms are drawn a tile at a time into a stack buffer
  const int64_t tiles = (n + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (n > detail::kParallelGrain / 4)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t i0 = t * kTile;
    const int64_t len = i0 + kTile < n ? kTile : n - i0;
    float u[kTile];
    detail::fill_uniform(seed, stream, index_offset + uint64_t(i0), len, u);
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) out[i0 + i] = u[i] >= p ? in[i0 + i] * keep_scale : 0.0f;
  }
}

}  // namespace

void dropout_rows(const float* in, float* out, const DropoutRows& rows, float p, uint64_t seed,
                  uint64_t stream) {
  const int64_t R = rows.rows(), D = rows.D;
  // Each row's tiles run on one thread; rows are spread over the threads (apply_dropout's own
  // loop stays serial inside a parallel region).
#pragma omp parallel for schedule(static) if (R * D > detail::kParallelGrain)
  for (int64_t r = 0; r < R; ++r)
    apply_dropout(in + r * D, out + r * D, D, p, seed, stream, rows.row_index(r));
}

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  apply_dropout(x, y, n, p, seed, stream, index_offset);
}

void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t index_offset) {
  apply_dropout(dy, dx, n, p, seed, stream, index_offset);
}

}  // namespace megatron::kernels::cpu
