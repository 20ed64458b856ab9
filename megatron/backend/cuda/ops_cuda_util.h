#pragma once
// What the CUDA backend's op files (ops_cuda*.cpp) share: dtype checks, typed
// device pointers and the current stream. Not an interface: include only from those files.
#include <cuda_runtime.h>

#include <initializer_list>
#include <utility>

#include "kernels/cuda/storage_type.h"
#include "megatron/backend/cuda/allocator.h"
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

// Norm weights: fp32 (with any activation type) or the activations' own type.
template <typename T, typename Fn>
void with_weight_type(const Tensor& w, const char* op, Fn&& fn) {
  if (w.dtype() == DType::F32) {
    fn.template operator()<float>();
    return;
  }
  MT_CHECK(w.dtype() == kernels::cuda::dtype_of<T>(), op, ": the weight must be fp32 or ",
           dtype_name(kernels::cuda::dtype_of<T>()), " (the activations' dtype), got ",
           dtype_name(w.dtype()));
  fn.template operator()<T>();
}

// Scratch memory for one op, from the caching allocator on the current stream: freed when the
// op returns and reusable at once by later work on the same stream (stream order).
inline megatron::cuda::DeviceMemory workspace(size_t bytes) {
  return megatron::cuda::DeviceMemory(megatron::cuda::device_allocator(), bytes, stream());
}

}  // namespace megatron::ops::cuda_backend::detail
