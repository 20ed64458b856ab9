#pragma once
// Helpers shared by the CPU kernel sources (not a kernel interface).
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/common/numeric.h"
#include "kernels/common/philox.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cpu::detail {

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

// fp32 value of a stored element (fp32, or bf16 widened exactly), and the rounding back (to
// nearest even). Both vectorize, so a kernel templated on the storage type reads and writes bf16
// without fp32 copies of whole tensors.
inline float to_f32(float x) { return x; }
inline float to_f32(bf16_t x) { return math::bf16_bits_to_float(x.bits); }
template <typename T>
inline T from_f32(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else
    return T{math::float_to_bf16_bits(x)};
}

// max(x[0..n)), -inf for n = 0; NaNs are skipped. g++ does not vectorize a float max reduction
// even under `omp simd reduction(max)`, but does vectorize this element-wise max over 16 lanes.
template <typename T>
inline float max_of(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  float lanes[kLanes];
  for (int k = 0; k < kLanes; ++k) lanes[k] = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const float v = to_f32(x[j + k]);
      lanes[k] = lanes[k] < v ? v : lanes[k];
    }
  float m = kNegInf;
  for (; j < n; ++j) m = m < to_f32(x[j]) ? to_f32(x[j]) : m;
  for (int k = 0; k < kLanes; ++k) m = m < lanes[k] ? lanes[k] : m;
  return m;
}

// Work below this many elements runs on one thread (OpenMP start-up would dominate).
constexpr int64_t kParallelGrain = 1 << 14;

}  // namespace megatron::kernels::cpu::detail
