#include "megatron/hf/mxfp4.h"

#include <array>
#include <cmath>
#include <utility>

#include "megatron/core/error.h"

namespace megatron::hf {

float fp4_e2m1_to_float(uint8_t nibble) {
  static constexpr std::array<float, 8> kMagnitude = {0.0f, 0.5f, 1.0f, 1.5f,
                                                      2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[nibble & 7u];
  return (nibble & 8u) ? -m : m;
}

void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups,
                      float* out) {
  for (int64_t g = 0; g < rows * groups; ++g) {
    const int exponent = static_cast<int>(scales[g]) - 127;
    const uint8_t* b = blocks + g * 16;
    float* o = out + g * 32;
    for (int i = 0; i < 16; ++i) {
      o[2 * i] = std::ldexp(fp4_e2m1_to_float(b[i] & 0x0F), exponent);
      o[2 * i + 1] = std::ldexp(fp4_e2m1_to_float(static_cast<uint8_t>(b[i] >> 4)), exponent);
    }
  }
}

std::pair<int64_t, int64_t> check_mxfp4_shapes(const std::string& blocks_name,
                                               const std::vector<int64_t>& blocks_shape,
                                               const std::string& scales_name,
                                               const std::vector<int64_t>& scales_shape) {
  auto text = [](const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
  };
  MT_INPUT_CHECK(blocks_shape.size() >= 2 && blocks_shape.back() == 16, blocks_name, " ",
                 text(blocks_shape),
                 ": MXFP4 blocks must be [..., groups, 16] (32 FP4 values a group)");
  const std::vector<int64_t> want(blocks_shape.begin(), blocks_shape.end() - 1);
  MT_INPUT_CHECK(scales_shape == want, scales_name, " ", text(scales_shape), " does not match ",
                 blocks_name, " ", text(blocks_shape), ": one scale a group, ", text(want));
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < blocks_shape.size(); ++i) rows *= blocks_shape[i];
  return {rows, blocks_shape[blocks_shape.size() - 2]};
}

}  // namespace megatron::hf
