#include "kernels/cpu/kv_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cpu {

void kv_cache_attention(const AttentionShape& sh, float scale, const float* qkv, float* keys,
                        float* values, int64_t past, int64_t capacity, float* out, int64_t window,
                        float softcap, const float* sinks) {
  const int64_t S = sh.S, B = sh.B, H = sh.H, G = sh.G, Dh = sh.Dh, per = H / G;
  const int64_t slots = per + 2, total = past + S;
  // Append the new keys and values.
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t g = 0; g < G; ++g) {
        const float* row = qkv + ((s * B + b) * G + g) * slots * Dh;
        const int64_t at = ((b * G + g) * capacity + past + s) * Dh;
        std::memcpy(keys + at, row + per * Dh, static_cast<size_t>(Dh) * sizeof(float));
        std::memcpy(values + at, row + (per + 1) * Dh, static_cast<size_t>(Dh) * sizeof(float));
      }
#pragma omp parallel
  {
    std::vector<float> scores(static_cast<size_t>(total));
#pragma omp for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / per;
        const float* k = keys + (b * G + g) * capacity * Dh;
        const float* v = values + (b * G + g) * capacity * Dh;
        for (int64_t i = 0; i < S; ++i) {
          const float* q = qkv + ((i * B + b) * G + g) * slots * Dh + (h % per) * Dh;
          const int64_t lim = past + i + 1;  // causal: keys up to this query's position
          const int64_t first = window > 0 ? std::max<int64_t>(0, lim - window) : 0;
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = first; j < lim; ++j) {
            float dot = 0.0f;
            for (int64_t d = 0; d < Dh; ++d) dot += q[d] * k[j * Dh + d];
            scores[j] = softcap > 0.0f ? math::softcap(dot * scale, softcap) : dot * scale;
            mx = std::max(mx, scores[j]);
          }
          float sum = 0.0f;
          for (int64_t j = first; j < lim; ++j) sum += scores[j] = math::exp_approx(scores[j] - mx);
          if (sinks != nullptr) sum += std::exp(sinks[h] - mx);
          const float inv = 1.0f / sum;
          float* o = out + ((i * B + b) * H + h) * Dh;
          std::fill(o, o + Dh, 0.0f);
          for (int64_t j = first; j < lim; ++j) {
            const float p = scores[j] * inv;
            for (int64_t d = 0; d < Dh; ++d) o[d] += p * v[j * Dh + d];
          }
        }
      }
  }
}

}  // namespace megatron::kernels::cpu
