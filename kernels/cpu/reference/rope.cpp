#include "kernels/cpu/reference/rope.h"

#include <cmath>

#include "kernels/common/numeric.h"

namespace megatron::kernels::ref {
namespace {

void rotate(const AttentionShape& sh, float* qkv, const math::RopeFrequencies& rope,
            int64_t position_offset, const int32_t* positions, double direction) {
  const int64_t per_group = sh.H / sh.G + 2, R = rope.rotated_dims(sh.Dh), half = R / 2;
  for (int64_t s = 0; s < sh.S; ++s) {
    for (int64_t b = 0; b < sh.B; ++b) {
      for (int64_t g = 0; g < sh.G; ++g) {
        for (int64_t h = 0; h < per_group - 1; ++h) {  // query heads and the key head
          float* x = qkv + (((s * sh.B + b) * sh.G + g) * per_group + h) * sh.Dh;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t pos = positions ? positions[s * sh.B + b] : position_offset + s;
            const float angle = float(pos) * math::rope_inv_freq(i, R, rope);
            const double scale = rope.attention_scale;
            const double c = scale * std::cos(double(angle)),
                         sn = direction * scale * std::sin(double(angle));
            const double x1 = x[i], x2 = x[i + half];
            x[i] = float(x1 * c - x2 * sn);
            x[i + half] = float(x2 * c + x1 * sn);
          }
        }
      }
    }
  }
}

}  // namespace

void rope_forward(const AttentionShape& shape, float* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions) {
  rotate(shape, qkv, rope, position_offset, positions, 1.0);
}

void rope_backward(const AttentionShape& shape, float* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions) {
  rotate(shape, dqkv, rope, position_offset, positions, -1.0);
}

}  // namespace megatron::kernels::ref
