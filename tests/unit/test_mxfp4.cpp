// MXFP4 dequantization (megatron/hf/mxfp4.h) against transformers' own
// (convert_moe_packed_tensors, what its GPT-OSS loader runs; tests/fixtures/mxfp4 made by
// tools/gen_mxfp4_fixture.py): the same fp32 bits for every value, scales 2^-127 to 2^127
// included; the e2m1 table; shapes that do not fit refused naming the tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "megatron/core/error.h"
#include "megatron/hf/mxfp4.h"
#include "tests/support/test_paths.h"

namespace megatron::hf {
namespace {

using ::testing::HasSubstr;

std::vector<char> read_all(const std::string& name) {
  std::ifstream in(std::filesystem::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/mxfp4" / name,
                   std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(Mxfp4, DequantizesAsTransformersDoes) {
  const int64_t E = 2, rows = 3, G = 4;
  const auto blocks = read_all("blocks.bin"), scales = read_all("scales.bin"),
             expected = read_all("expected.bin");
  ASSERT_EQ(blocks.size(), size_t(E * rows * G * 16));
  ASSERT_EQ(scales.size(), size_t(E * rows * G));
  ASSERT_EQ(expected.size(), size_t(E * rows * G * 32 * 4));
  std::vector<float> out(static_cast<size_t>(E * rows * G * 32));
  dequantize_mxfp4(reinterpret_cast<const uint8_t*>(blocks.data()),
                   reinterpret_cast<const uint8_t*>(scales.data()), E * rows, G, out.data());
  // transformers' result is [E, G * 32, rows]: ours [E, rows, G * 32] transposed.
  int infinite = 0, negative_zero = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < G * 32; ++c) {
        const float got = out[static_cast<size_t>((e * rows + r) * G * 32 + c)];
        float want;
        std::memcpy(&want, expected.data() + ((e * G * 32 + c) * rows + r) * 4, 4);
        uint32_t a, b;
        std::memcpy(&a, &got, 4);
        std::memcpy(&b, &want, 4);
        ASSERT_EQ(a, b) << "expert " << e << " row " << r << " column " << c << ": " << got
                        << " vs " << want;
        infinite += std::isinf(got);
        negative_zero += got == 0.0f && std::signbit(got);
      }
  EXPECT_GT(infinite, 0);  // 6 * 2^127 overflows, as in transformers
  EXPECT_GT(negative_zero, 0);
}

TEST(Mxfp4, E2m1Values) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (uint8_t n = 0; n < 16; ++n) EXPECT_EQ(fp4_e2m1_to_float(n), want[n]) << int(n);
  EXPECT_TRUE(std::signbit(fp4_e2m1_to_float(8)));
}

TEST(Mxfp4, ShapesThatDoNotFitAreRefused) {
  const auto [rows, groups] =
      check_mxfp4_shapes("w_blocks", {32, 5760, 90, 16}, "w_scales", {32, 5760, 90});
  EXPECT_EQ(rows, 32 * 5760);
  EXPECT_EQ(groups, 90);
  auto error = [](const std::vector<int64_t>& b, const std::vector<int64_t>& s) {
    try {
      check_mxfp4_shapes("down_proj_blocks", b, "down_proj_scales", s);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error({4, 8, 15}, {4, 8}),
              HasSubstr("down_proj_blocks [4, 8, 15]: MXFP4 blocks must be [..., groups, 16]"));
  EXPECT_THAT(error({4, 8, 16}, {4, 9}),
              HasSubstr("down_proj_scales [4, 9] does not match down_proj_blocks [4, 8, 16]"));
  EXPECT_THAT(error({16}, {}), HasSubstr("must be [..., groups, 16]"));
}

}  // namespace
}  // namespace megatron::hf
