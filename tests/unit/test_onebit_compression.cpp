// 1-bit Adam's sign compression (megatron/optimizer/onebit_compression.h) against a naive
// reference: the scale is the buffer's RMS, the bits its signs (0 counts as +), the error keeps
// exactly buffer - scale * sign, and decompression adds +-scale; a group of one leaves vectors as
// they are. (Across ranks and in training: tests/parallel/test_onebit_adam.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

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

}  // namespace
}  // namespace megatron::optim
