#include "megatron/hf/fp8_blocks.h"

#include <cmath>
#include <limits>

#include "megatron/core/error.h"
#include "megatron/core/format.h"

namespace megatron::hf {

Fp8Blocks fp8_blocks_of(const ConfigJson& c) {
  if (!c.json().contains("quantization_config") || c.json()["quantization_config"].is_null())
    return {};
  const auto& q = c.json()["quantization_config"];
  const char* key = "quantization_config";
  if (!q.is_object()) c.fail(key, "must be an object");
  const std::string method = q.value("quant_method", std::string());
  if (method != "fp8")
    c.fail(key, concat("quant_method '", method,
                       "' is not converted (fp8 with 2-D weight blocks, DeepSeek-V3's, is)"));
  if (q.value("fmt", std::string("e4m3")) != "e4m3")
    c.fail(key, concat("fp8 fmt '", q.value("fmt", std::string()), "' (only e4m3)"));
  const auto& b = q.contains("weight_block_size") ? q["weight_block_size"] : nlohmann::json();
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0)
    c.fail(key,
           "weight_block_size must be two positive integers (per-tensor or per-channel "
           "FP8 scales are not converted)");
  return {b[0].get<int64_t>(), b[1].get<int64_t>()};
}

float fp8_e4m3_to_float(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  float v;
  if (exponent == 0xF && mantissa == 0x7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    v = std::ldexp(static_cast<float>(mantissa) / 8.0f, -6);
  else
    v = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return sign ? -v : v;
}

void apply_fp8_block_scales(std::vector<float>& w, int64_t rows, int64_t cols,
                            const std::vector<float>& scale, const Fp8Blocks& blocks) {
  const int64_t scale_cols = (cols + blocks.cols - 1) / blocks.cols;
  MT_CHECK(static_cast<int64_t>(w.size()) == rows * cols &&
               static_cast<int64_t>(scale.size()) ==
                   ((rows + blocks.rows - 1) / blocks.rows) * scale_cols,
           "apply_fp8_block_scales: sizes");
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = scale.data() + (i / blocks.rows) * scale_cols;
    float* row = w.data() + i * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] *= s[j / blocks.cols];
  }
}

}  // namespace megatron::hf
