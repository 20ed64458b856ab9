#pragma once
// What the CUDA backend's op files (ops_cuda.cpp, ops_cuda_moe.cpp) share: dtype checks, typed
// device pointers and the current stream. Not an interface: include only from those files.
#include <cuda_runtime.h>

#include <initializer_list>
#include <utility>

#include "kernels/cuda/storage_type.h"
#include "megatron/backend/cuda/runtime.h"
#include "megatron/core/error.h"
#include "megatron/core/tensor.h"

namespace megatron::ops::cuda_backend::detail {

inline void expect(const char* op, const Tensor& t, const char* name, DType want) {
  MT_CHECK(t.dtype() == want, op, ": ", name, " must be ", dtype_name(want), " on cuda, got ",
           dtype_name(t.dtype()));
}

// Every given tensor (null: an optional one not given) is T.
template <typename T>
void expect_all(const char* op, std::initializer_list<std::pair<const Tensor*, const char*>> args) {
  for (const auto& [t, name] : args)
    if (t != nullptr) expect(op, *t, name, kernels::cuda::dtype_of<T>());
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw());
}

inline cudaStream_t stream() { return megatron::cuda::current_stream(); }

}  // namespace megatron::ops::cuda_backend::detail
