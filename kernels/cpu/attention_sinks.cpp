#include "kernels/cpu/attention_sinks.h"

#include <cmath>
#include <vector>

namespace megatron::kernels::cpu {
namespace {

// r = sigmoid(lse - sigma); 0 for a fully masked row.
inline float sink_scale(float lse, float sigma) {
  if (std::isinf(lse) && lse < 0.0f) return 0.0f;
  return 1.0f / (1.0f + std::exp(sigma - lse));
}

}  // namespace

void attention_sinks_forward(const AttentionShape& sh, const float* sinks, const float* lse,
                             float* out) {
  const int64_t S = sh.S, B = sh.B, H = sh.H, Dh = sh.Dh;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const float r = sink_scale(lse[(b * H + h) * S + s], sinks[h]);
        float* o = out + ((s * B + b) * H + h) * Dh;
        for (int64_t d = 0; d < Dh; ++d) o[d] *= r;
      }
}

void attention_sinks_backward(const AttentionShape& sh, const float* sinks, const float* lse,
                              const float* out, const float* dout, float* dout_scaled,
                              float* dsinks) {
  const int64_t S = sh.S, B = sh.B, H = sh.H, Dh = sh.Dh;
  // Per-(b, h) partial sums in double, added in a fixed order: the same bits at any thread count.
  std::vector<double> partial(static_cast<size_t>(B * H), 0.0);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double acc = 0.0;
      for (int64_t s = 0; s < S; ++s) {
        const float r = sink_scale(lse[(b * H + h) * S + s], sinks[h]);
        const int64_t at = ((s * B + b) * H + h) * Dh;
        double dot = 0.0;
        for (int64_t d = 0; d < Dh; ++d) dot += double(dout[at + d]) * out[at + d];
        acc -= (1.0 - double(r)) * dot;
        for (int64_t d = 0; d < Dh; ++d) dout_scaled[at + d] = r * dout[at + d];
      }
      partial[static_cast<size_t>(b * H + h)] = acc;
    }
  if (dsinks == nullptr) return;
  for (int64_t h = 0; h < H; ++h) {
    double sum = 0.0;
    for (int64_t b = 0; b < B; ++b) sum += partial[static_cast<size_t>(b * H + h)];
    dsinks[h] += static_cast<float>(sum);
  }
}

}  // namespace megatron::kernels::cpu
