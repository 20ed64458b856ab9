// 1-bit Adam's sign compression (megatron/optimizer/onebit_compression.h) against a naive
// reference: the scale is the buffer's RMS, the bits its signs (0 counts as +), the error keeps
// exactly buffer - scale * sign, and decompression adds +-scale; a group of one leaves vectors as
// they are. The step bound 1-bit Adam clamps to is one AdamW's own moments never exceed, and
// reach. (Across ranks and in training: tests/parallel/test_onebit_adam.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "megatron/optimizer/onebit_adam.h"
#include "megatron/optimizer/onebit_compression.h"

namespace megatron::optim {
namespace {

TEST(OnebitCompression, SignsScaleAndErrorMatchTheNaiveReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d;
  const int64_t n = 40;  // five bytes of bits
  std::vector<float> x(n), error(n), want_error(n);
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = d(rng);
    error[size_t(i)] = want_error[size_t(i)] = 0.1f * d(rng);
  }
  x[3] = -error[3];  // buffer exactly 0: sign +
  std::vector<uint8_t> bits(n / 8, 0xAA);
  const float scale = sign_compress(x.data(), error.data(), n, bits.data());
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) {
    want_error[size_t(i)] += x[size_t(i)];
    squares += double(want_error[size_t(i)]) * want_error[size_t(i)];
  }
  EXPECT_FLOAT_EQ(scale, float(std::sqrt(squares / n)));
  std::vector<float> decoded(n, 1.0f);
  sign_accumulate(bits.data(), scale, n, decoded.data());
  for (int64_t i = 0; i < n; ++i) {
    const float buffer = want_error[size_t(i)];
    const bool positive = buffer >= 0.0f;
    EXPECT_EQ((bits[size_t(i / 8)] >> (i % 8)) & 1, positive ? 1 : 0) << i;
    EXPECT_FLOAT_EQ(error[size_t(i)], buffer - (positive ? scale : -scale)) << i;
    EXPECT_FLOAT_EQ(decoded[size_t(i)], 1.0f + (positive ? scale : -scale)) << i;
  }
  EXPECT_EQ((bits[0] >> 3) & 1, 1) << "sign of 0 is +";
}

TEST(OnebitCompression, AGroupOfOneLeavesTheVectorsAlone) {
  auto self = parallel::make_single_process_communicator();
  OnebitAllReduce reduce(*self, {3, 700});
  std::vector<float> a{1.0f, -2.0f, 0.5f}, b(700, 0.25f);
  reduce.average({a.data(), b.data()});
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f, 0.5f}));
  EXPECT_EQ(b, std::vector<float>(700, 0.25f));
  EXPECT_EQ(reduce.take_bytes(), 0);
  // Error buffers sized to the padded blocks (a group of one pads to whole blocks).
  EXPECT_EQ(reduce.worker_error().numel(), kOnebitBlock + 3 * kOnebitBlock);
}

// |m / sqrt(v)| of AdamW's moments (no bias correction) stays within adam_step_bound over a
// random gradient sequence with spikes, and the extremal sequence (the gradient k steps old
// proportional to (beta1 / beta2)^k, Cauchy-Schwarz's equality case) reaches it.
TEST(OnebitCompression, TheStepBoundIsAdamWsOwn) {
  EXPECT_NEAR(adam_step_bound(0.9, 0.95), 1.1650, 1e-4);
  EXPECT_NEAR(adam_step_bound(0.9, 0.999), 7.2703, 1e-4);
  EXPECT_TRUE(std::isinf(adam_step_bound(0.99, 0.95)));
  for (const auto& [b1, b2] : {std::pair{0.9, 0.95}, std::pair{0.9, 0.999}, std::pair{0.8, 0.99}}) {
    const double bound = adam_step_bound(b1, b2);
    std::mt19937 rng(3);
    std::normal_distribution<double> d;
    double m = 0, v = 0, worst = 0;
    for (int t = 0; t < 5000; ++t) {
      const double g = d(rng) * (t % 97 == 0 ? 50.0 : 1.0);
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      worst = std::max(worst, std::fabs(m) / std::sqrt(v));
    }
    EXPECT_LE(worst, bound) << b1 << ", " << b2;
    // The extremal sequence: g_{T-k} = (b1 / b2)^k for k = 0..T.
    const int T = 4000;
    m = v = 0;
    for (int t = 0; t <= T; ++t) {
      const double g = std::pow(b1 / b2, T - t);
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
    }
    EXPECT_NEAR(std::fabs(m) / std::sqrt(v), bound, 0.01 * bound) << b1 << ", " << b2;
  }
}

}  // namespace
}  // namespace megatron::optim
