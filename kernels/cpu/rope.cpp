#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

// Rotates the query and key heads of every token by +angle (forward) or -angle (backward).
void rope_apply(const AttentionShape& shape, float* qkv, const math::RopeFrequencies& rope,
                int64_t position_offset, const int32_t* positions, float sin_sign) {
  const int64_t S = shape.S, B = shape.B, H = shape.H, G = shape.G, Dh = shape.Dh;
  const int64_t R = rope.rotated_dims(Dh);  // the turning part of each head
  MT_CHECK(R % 2 == 0 && R <= Dh && G > 0 && H % G == 0, "rope: bad shape Dh=", Dh, " H=", H,
           " G=", G, " rotary dims ", R);
  const int64_t half = R / 2, per_group = H / G + 2;
  // cos/sin per (position, pair), computed once and reused by all heads of that position:
  // table row p is position position_offset + p, or position p when `positions` are given.
  int64_t rows = S;
  if (positions != nullptr) {
    rows = 0;
    for (int64_t sb = 0; sb < S * B; ++sb) {
      MT_CHECK(positions[sb] >= 0, "rope: negative position ", positions[sb], " at token ", sb);
      rows = std::max<int64_t>(rows, positions[sb] + 1);
    }
    position_offset = 0;
  }
  std::vector<float> inv_freq(half), cos_t(rows * half), sin_t(rows * half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = math::rope_inv_freq(i, R, rope);
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(position_offset + s) * inv_freq[i];
      cos_t[s * half + i] = std::cos(angle) * rope.attention_scale;
      sin_t[s * half + i] = sin_sign * (std::sin(angle) * rope.attention_scale);
    }
  }
#pragma omp parallel for schedule(static) if (S * B * (H + 2 * G) * Dh > detail::kParallelGrain)
  for (int64_t sb = 0; sb < S * B; ++sb) {
    const int64_t row = positions != nullptr ? positions[sb] : sb / B;
    const float* c = cos_t.data() + row * half;
    const float* sn = sin_t.data() + row * half;
    float* token = qkv + sb * G * per_group * Dh;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t h = 0; h < per_group - 1; ++h) {  // the group's query heads and its key head
        float* x = token + (g * per_group + h) * Dh;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) math::rope_rotate(x[i], x[i + half], c[i], sn[i]);
      }
    }
  }
}

}  // namespace

void rope_forward(const AttentionShape& shape, float* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions) {
  rope_apply(shape, qkv, rope, position_offset, positions, 1.0f);
}

void rope_backward(const AttentionShape& shape, float* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions) {
  rope_apply(shape, dqkv, rope, position_offset, positions, -1.0f);
}

}  // namespace megatron::kernels::cpu
