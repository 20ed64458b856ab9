#pragma once
// The CUDA storage types of the float dtypes (float, __nv_bfloat16, __half) and the one
// runtime -> template switch over them, for host code (.cpp) and CUDA sources (.cu) alike.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "megatron/core/dtype.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cuda {

// The DType of a storage type.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::F32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::BF16;
  static_assert(
      std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
      "storage type must be float, __nv_bfloat16 or __half");
  return DType::F16;
}

// A value standing for storage type T (for C++17 generic lambdas in .cu sources).
template <typename T>
struct StorageTag {
  using type = T;
};

// Calls fn for the storage type of `t`: fn(StorageTag<T>{}) when fn takes a tag (a generic
// lambda), else fn.template operator()<T>() (a C++20 template lambda). Any other dtype is an
// error naming `op` and `what`.
template <typename Fn>
void with_storage_type(DType t, const char* op, const char* what, Fn&& fn) {
  auto call = [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_invocable_v<Fn&, StorageTag<T>>)
      fn(tag);
    else
      fn.template operator()<T>();
  };
  switch (t) {
    case DType::F32:
      call(StorageTag<float>{});
      return;
    case DType::BF16:
      call(StorageTag<__nv_bfloat16>{});
      return;
    case DType::F16:
      call(StorageTag<__half>{});
      return;
    default:
      break;
  }
  MT_CHECK(false, op, ": ", what, " must be fp32, bf16 or fp16 on cuda, got ", dtype_name(t));
}

}  // namespace megatron::kernels::cuda
