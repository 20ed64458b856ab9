#include "megatron/hf/hf_dtype.h"

#include <cstring>

#include "kernels/common/numeric.h"
#include "megatron/core/error.h"

namespace megatron::hf {

bool float_dtype(std::string_view d) { return d == "F32" || d == "BF16" || d == "F16"; }

std::string dtype_from_torch(std::string_view t) {
  if (t == "float32") return "F32";
  if (t == "bfloat16") return "BF16";
  if (t == "float16") return "F16";
  return {};
}

std::string dtype_from_flag(std::string_view f) {
  if (f == "fp32") return "F32";
  if (f == "bf16") return "BF16";
  if (f == "fp16") return "F16";
  return {};
}

std::string torch_name(std::string_view d) {
  if (d == "F32") return "float32";
  if (d == "BF16") return "bfloat16";
  if (d == "F16") return "float16";
  return {};
}

void to_float(std::string_view dtype, const void* src, float* dst, int64_t n) {
  if (dtype == "F32") {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (dtype == "BF16" || dtype == "F16") {
    const auto* s = static_cast<const uint16_t*>(src);
    const bool bf = dtype == "BF16";
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf ? math::bf16_bits_to_float(s[i]) : math::fp16_bits_to_float(s[i]);
  } else {
    MT_CHECK(false, "hf::to_float: unsupported dtype ", dtype);
  }
}

void from_float(std::string_view dtype, const float* src, void* dst, int64_t n) {
  if (dtype == "F32") {
    std::memcpy(dst, src, static_cast<size_t>(n) * 4);
  } else if (dtype == "BF16" || dtype == "F16") {
    auto* d = static_cast<uint16_t*>(dst);
    const bool bf = dtype == "BF16";
    for (int64_t i = 0; i < n; ++i)
      d[i] = bf ? math::float_to_bf16_bits(src[i]) : math::float_to_fp16_bits(src[i]);
  } else {
    MT_CHECK(false, "hf::from_float: unsupported dtype ", dtype);
  }
}

}  // namespace megatron::hf
