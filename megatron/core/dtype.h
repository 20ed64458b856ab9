#pragma once
// The explicit element type of every tensor, plus the one runtime->template dispatch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "megatron/core/error.h"

namespace megatron {

enum class DType : uint8_t { F32, F64, BF16, F16, I64, I32, I16, I8, U16, U8 };

// Storage types for the 16-bit floats (bit patterns; convert with kernels/common/numeric.h).
struct bf16_t {
  uint16_t bits;
};
struct fp16_t {
  uint16_t bits;
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F64:
    case DType::I64:
      return 8;
    case DType::F32:
    case DType::I32:
      return 4;
    case DType::BF16:
    case DType::F16:
    case DType::I16:
    case DType::U16:
      return 2;
    case DType::I8:
    case DType::U8:
      return 1;
  }
  return 0;
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}

std::string_view dtype_name(DType t);
// Accepts our names and the usual aliases ("float32", "bfloat16", "fp16", "int32", ...).
DType parse_dtype(std::string_view name);

// The DType of a storage type: DTypeOf<T>::value.
template <typename T>
struct DTypeOf {
  static constexpr DType value = [] {
    if constexpr (std::is_same_v<T, float>) return DType::F32;
    if constexpr (std::is_same_v<T, double>) return DType::F64;
    if constexpr (std::is_same_v<T, bf16_t>) return DType::BF16;
    if constexpr (std::is_same_v<T, fp16_t>) return DType::F16;
    if constexpr (std::is_same_v<T, int64_t>) return DType::I64;
    if constexpr (std::is_same_v<T, int32_t>) return DType::I32;
    if constexpr (std::is_same_v<T, int16_t>) return DType::I16;
    if constexpr (std::is_same_v<T, int8_t>) return DType::I8;
    if constexpr (std::is_same_v<T, uint16_t>) return DType::U16;
    if constexpr (std::is_same_v<T, uint8_t>) return DType::U8;
    static_assert(std::is_same_v<T, uint8_t> || std::is_same_v<T, uint16_t> ||
                      std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> ||
                      std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t> ||
                      std::is_same_v<T, fp16_t> || std::is_same_v<T, bf16_t> ||
                      std::is_same_v<T, double> || std::is_same_v<T, float>,
                  "no DType for this type");
    return DType::U8;
  }();
};

// The one runtime -> template switch: fn is called as fn.template operator()<T>().
template <typename Fn>
decltype(auto) dispatch_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32:
      return fn.template operator()<float>();
    case DType::F64:
      return fn.template operator()<double>();
    case DType::BF16:
      return fn.template operator()<bf16_t>();
    case DType::F16:
      return fn.template operator()<fp16_t>();
    case DType::I64:
      return fn.template operator()<int64_t>();
    case DType::I32:
      return fn.template operator()<int32_t>();
    case DType::I16:
      return fn.template operator()<int16_t>();
    case DType::I8:
      return fn.template operator()<int8_t>();
    case DType::U16:
      return fn.template operator()<uint16_t>();
    case DType::U8:
      return fn.template operator()<uint8_t>();
  }
  MT_CHECK(false, "invalid dtype code ", static_cast<int>(t));
  __builtin_unreachable();
}

}  // namespace megatron
