#include "megatron/core/dtype.h"

namespace megatron {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "fp32";
    case DType::F64:
      return "fp64";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "fp16";
    case DType::I64:
      return "int64";
    case DType::I32:
      return "int32";
    case DType::I16:
      return "int16";
    case DType::I8:
      return "int8";
    case DType::U16:
      return "uint16";
    case DType::U8:
      return "uint8";
  }
  return "invalid";
}

DType parse_dtype(std::string_view name) {
  struct Alias {
    std::string_view name;
    DType type;
  };
  static constexpr Alias kAliases[] = {
      {"fp32", DType::F32},    {"float32", DType::F32},   {"float", DType::F32},
      {"fp64", DType::F64},    {"float64", DType::F64},   {"double", DType::F64},
      {"bf16", DType::BF16},   {"bfloat16", DType::BF16}, {"fp16", DType::F16},
      {"float16", DType::F16}, {"half", DType::F16},      {"int64", DType::I64},
      {"int32", DType::I32},   {"int16", DType::I16},     {"int8", DType::I8},
      {"uint16", DType::U16},  {"uint8", DType::U8},
  };
  for (const Alias& a : kAliases)
    if (a.name == name) return a.type;
  throw InputError(concat("unknown dtype '", name,
                          "' (expected fp32, bf16, fp16, fp64, int64, int32, int16, int8, uint16, "
                          "uint8)"));
}

}  // namespace megatron
