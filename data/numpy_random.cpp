#include "data/numpy_random.h"

#include "megatron/core/error.h"

namespace megatron::data {

void MT19937::seed_genrand(uint32_t seed) {
  mt_[0] = seed;
  for (int i = 1; i < kN; ++i) {
    const uint32_t prev = mt_[i - 1];
    mt_[i] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(i);
  }
  pos_ = kN;
}

void MT19937::twist() {
  constexpr int kM = 397;
  constexpr uint32_t kMatrixA = 0x9908b0dfu, kUpper = 0x80000000u, kLower = 0x7fffffffu;
  for (int i = 0; i < kN; ++i) {
    const uint32_t y = (mt_[i] & kUpper) | (mt_[(i + 1) % kN] & kLower);
    mt_[i] = mt_[(i + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  pos_ = 0;
}

uint32_t MT19937::next_uint32() {
  if (pos_ >= kN) twist();
  uint32_t y = mt_[pos_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

namespace {
uint32_t checked_seed(uint64_t seed) {
  MT_INPUT_CHECK(seed <= 0xffffffffull, "random seed ", seed,
                 " is out of range: numpy's RandomState (which Megatron's datasets use) takes "
                 "seeds in [0, 2^32 - 1]");
  return static_cast<uint32_t>(seed);
}
}  // namespace

NumpyRandomState::NumpyRandomState(uint64_t seed) : mt_(checked_seed(seed)) {}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  const uint64_t mask = covering_mask(max);
  uint64_t value;
  if (max <= 0xffffffffull) {
    do {
      value = mt_.next_uint32() & mask;
    } while (value > max);
  } else {
    do {
      value = mt_.next_uint64() & mask;
    } while (value > max);
  }
  return value;
}

double numpy_sum(std::span<const double> a) {
  const size_t n = a.size();
  if (n < 8) {
    double res = 0.0;
    for (double x : a) res += x;
    return res;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return numpy_sum(a.subspan(0, n2)) + numpy_sum(a.subspan(n2));
}

}  // namespace megatron::data
