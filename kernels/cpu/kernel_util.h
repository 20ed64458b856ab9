#pragma once
// Helpers shared by the CPU kernel sources (not a kernel interface).
#include <bit>
#include <cstdint>

#include "kernels/common/philox.h"

namespace megatron::kernels::cpu::detail {

// expf that g++ can vectorize (glibc's expf only vectorizes under -ffast-math). Cephes range
// reduction x = n ln2 + r and a degree-6 polynomial: within ~2 ulp of expf on [-87.3, 88];
// exactly 0 below (including -inf), NaN stays NaN, clamped at exp(88) above. The softmax-style
// loops that use it only pass x - max <= 0.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // few mantissa bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kMin = -87.33654f;     // ln(2^-126), smallest normal result
  const float xc = x > 88.0f ? 88.0f : (x < kMin ? kMin : x);
  const float t = xc * kLog2e + kRound;  // low mantissa bits of t hold n = round(xc * log2 e)
  const float n = t - kRound;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const uint32_t n_bits = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);
  const float two_n = std::bit_cast<float>((n_bits + 127u) << 23);
  return x < kMin ? 0.0f : p * two_n;
}

// out[i] = philox::uniform(seed, stream, start + i) for i < n, computing each Philox block once
// for its four words (the block loop vectorizes; per-element calls would redo each block 4x).
inline void fill_uniform(uint64_t seed, uint64_t stream, uint64_t start, int64_t n, float* out) {
  int64_t i = 0;
  for (; i < n && ((start + i) & 3u) != 0; ++i) out[i] = philox::uniform(seed, stream, start + i);
  const int64_t blocks = (n - i) / 4;
  const uint64_t first_block = (start + i) >> 2;
  float* body = out + i;
  for (int64_t k = 0; k < blocks; ++k) {
    const philox::U32x4 r = philox::random_block(seed, stream, first_block + k);
    body[4 * k + 0] = philox::to_unit_float(r.v[0]);
    body[4 * k + 1] = philox::to_unit_float(r.v[1]);
    body[4 * k + 2] = philox::to_unit_float(r.v[2]);
    body[4 * k + 3] = philox::to_unit_float(r.v[3]);
  }
  for (i += 4 * blocks; i < n; ++i) out[i] = philox::uniform(seed, stream, start + i);
}

// Work below this many elements runs on one thread (OpenMP start-up would dominate).
constexpr int64_t kParallelGrain = 1 << 14;

}  // namespace megatron::kernels::cpu::detail
