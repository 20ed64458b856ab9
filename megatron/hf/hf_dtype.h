#pragma once
// Hugging Face tensor dtypes <-> the fp32 a converter works in. F32, BF16 and F16 convert
// exactly into fp32, and back with round-to-nearest-even, so a value that came from a 16-bit
// tensor returns to the same bits.
#include <cstdint>
#include <string>
#include <string_view>

namespace megatron::hf {

// Whether a converter reads/writes this safetensors dtype ("F32", "BF16", "F16").
bool float_dtype(std::string_view dtype);
// config.json's torch_dtype ("float32", "bfloat16", "float16") <-> safetensors names; the
// converters' --dtype flag uses the short names fp32, bf16, fp16. Empty when unknown.
std::string dtype_from_torch(std::string_view torch_dtype);
std::string dtype_from_flag(std::string_view flag);
std::string torch_name(std::string_view dtype);

void to_float(std::string_view dtype, const void* src, float* dst, int64_t n);
void from_float(std::string_view dtype, const float* src, void* dst, int64_t n);

}  // namespace megatron::hf
