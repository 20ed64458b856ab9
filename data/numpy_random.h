#pragma once
// numpy's legacy RandomState, as far as Megatron's GPTDataset uses it: seeding, the bounded
// draw behind RandomState.shuffle, and the shuffle itself. Reproduces numpy's output exactly
// (tests/data/test_numpy_random.cpp checks against values numpy produced).
//
//   RandomState(seed)   MT19937 seeded with the reference init_genrand(seed) (numpy does so for
//                       an integer seed in [0, 2^32); larger seeds are an InputError here).
//   random_interval(m)  uniform in [0, m]: mask = m with every bit below its top bit set; draw
//                       (32-bit output) & mask until <= m. For m >= 2^32 each draw is a 64-bit
//                       value made of two outputs, the first one the high word.
//   shuffle(a)          Fisher-Yates from the end: for i = n-1 down to 1, swap a[i] with
//                       a[random_interval(i)]. n <= 1 consumes nothing.
// One RandomState is shared, in program order, by all the shuffles of one dataset, so the
// number of outputs each shuffle consumes matters; it does not depend on the element type.
#include <array>
#include <cstdint>
#include <span>
#include <utility>

namespace megatron::data {

// The 32-bit Mersenne Twister (MT19937), reference implementation.
class MT19937 {
 public:
  explicit MT19937(uint32_t seed) { seed_genrand(seed); }
  void seed_genrand(uint32_t seed);  // init_genrand
  uint32_t next_uint32();
  // Two outputs, the first one the high 32 bits (numpy's next_uint64 for MT19937).
  uint64_t next_uint64() {
    const uint64_t hi = next_uint32();
    return (hi << 32) | next_uint32();
  }

 private:
  void twist();
  static constexpr int kN = 624;
  std::array<uint32_t, kN> mt_{};
  int pos_ = kN;
};

// numpy's numpy.random.RandomState(seed) (legacy seeding), shuffle subset.
// The smallest all-ones bit pattern >= max (numpy's mask for bounded integers by rejection).
inline uint64_t covering_mask(uint64_t max) {
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  return mask;
}

class NumpyRandomState {
 public:
  // Throws InputError when seed >= 2^32 (numpy raises ValueError there).
  explicit NumpyRandomState(uint64_t seed);

  // Uniform in [0, max] by mask-and-reject, exactly as numpy's random_interval.
  uint64_t random_interval(uint64_t max);

  // In-place shuffle of a 1-D array, exactly as RandomState.shuffle.
  template <typename T>
  void shuffle(std::span<T> a) {
    for (size_t i = a.size(); i-- > 1;) {
      const auto j = static_cast<size_t>(random_interval(static_cast<uint64_t>(i)));
      std::swap(a[i], a[j]);
    }
  }

  MT19937& generator() { return mt_; }

 private:
  MT19937 mt_;
};

// numpy.sum over a float64 1-D array (pairwise summation: blocks of 8 accumulators up to 128
// elements, recursive halving beyond), so that weight normalisation matches numpy bit for bit.
double numpy_sum(std::span<const double> a);

}  // namespace megatron::data
