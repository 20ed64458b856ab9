// ZeRO++'s int8 block quantisation (megatron/distributed/quantized_comm.h) against a naive
// reference: per block of 256 a scale absmax / 127, values rounded to nearest, decoded within half
// a step of the input; a ragged last block, a block of zeros, bf16 input and the message size.
// (Across ranks and in training: tests/parallel/test_zero_plus_plus.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/distributed/quantized_comm.h"

namespace megatron::distributed {
namespace {

TEST(QuantizedComm, Int8BlocksMatchTheNaiveReference) {
  const int64_t n = 2 * kQuantBlock + 37;  // a ragged last block
  std::mt19937 rng(5);
  std::normal_distribution<float> d;
  std::vector<float> x(n);
  for (float& v : x) v = d(rng) * 3.0f;
  std::fill(x.begin() + kQuantBlock, x.begin() + 2 * kQuantBlock, 0.0f);  // a block of zeros
  ASSERT_EQ(quantized_bytes(n), 3 * 4 + n);
  std::vector<uint8_t> message(size_t(quantized_bytes(n)));
  quantize_int8(x.data(), DType::F32, n, message.data());
  std::vector<float> decoded(n, 7.0f), added(n, 1.0f);
  dequantize_int8(message.data(), n, DType::F32, decoded.data());
  dequantize_add_int8(message.data(), n, added.data());
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t begin = b * kQuantBlock, end = std::min(n, begin + kQuantBlock);
    float absmax = 0;
    for (int64_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(x[size_t(i)]));
    const float scale = absmax / 127.0f;
    float got;
    std::memcpy(&got, message.data() + 4 * b, 4);
    EXPECT_EQ(got, scale) << "block " << b;
    for (int64_t i = begin; i < end; ++i) {
      const float q = scale > 0 ? std::nearbyint(x[size_t(i)] / scale) : 0.0f;
      EXPECT_EQ(static_cast<int8_t>(message[size_t(3 * 4 + i)]), static_cast<int8_t>(q)) << i;
      EXPECT_EQ(decoded[size_t(i)], q * scale) << i;
      EXPECT_FLOAT_EQ(added[size_t(i)], 1.0f + q * scale) << i;  // (may fuse the multiply-add)
      EXPECT_LE(std::fabs(decoded[size_t(i)] - x[size_t(i)]), 0.5f * scale * 1.0001f) << i;
    }
  }
}

TEST(QuantizedComm, Bf16WeightsDecodeIntoBf16) {
  const int64_t n = 300;
  std::vector<uint16_t> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[size_t(i)] = math::float_to_bf16_bits(std::sin(0.1f * float(i)) * 0.02f);
  std::vector<uint8_t> message(size_t(quantized_bytes(n)));
  quantize_int8(x.data(), DType::BF16, n, message.data());
  std::vector<uint16_t> out(n);
  dequantize_int8(message.data(), n, DType::BF16, out.data());
  for (int64_t i = 0; i < n; ++i) {
    const float want = math::bf16_bits_to_float(x[size_t(i)]);
    const float got = math::bf16_bits_to_float(out[size_t(i)]);
    // Half an int8 step of the block's absmax (0.02 / 127 / 2), plus bf16's rounding.
    EXPECT_NEAR(got, want, 0.02f / 254 + 0.004f * std::fabs(want)) << i;
  }
}

}  // namespace
}  // namespace megatron::distributed
