// kernels/cpu/convert.h against the scalar conversions of kernels/common/numeric.h, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/convert.h"

namespace megatron::kernels {
namespace {

TEST(Convert, EveryBf16WidensExactly) {
  std::vector<bf16_t> in(65536);
  for (uint32_t i = 0; i < 65536; ++i) in[i].bits = static_cast<uint16_t>(i);
  std::vector<float> out(in.size());
  cpu::bf16_to_f32(in.data(), out.data(), int64_t(in.size()));
  for (uint32_t i = 0; i < 65536; ++i) {
    uint32_t u;
    std::memcpy(&u, &out[i], 4);
    ASSERT_EQ(u, i << 16) << i;
  }
}

TEST(Convert, NarrowingMatchesScalarRoundToNearestEven) {
  std::vector<float> in = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::signaling_NaN(),
                           std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(),
                           1e-40f,
                           3.0e38f};
  for (uint32_t tie : {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu, 0xff800001u}) {
    float f;
    std::memcpy(&f, &tie, 4);
    in.push_back(f);
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    in.push_back(f);
  }
  std::vector<bf16_t> out(in.size());
  cpu::f32_to_bf16(in.data(), out.data(), int64_t(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i].bits, math::float_to_bf16_bits(in[i])) << "element " << i << " = " << in[i];
}

}  // namespace
}  // namespace megatron::kernels
