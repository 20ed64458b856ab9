#pragma once
// Checked CUDA, cuBLAS(Lt), cuDNN and NCCL calls: a failure throws megatron::Error naming the
// call, the library's status name and string, and the file and line of the call.
//
// Only the CUDA runtime header is pulled in here. The library status types are all enums whose
// success value is 0, so the macros compare against 0 and hand the code to a formatter that
// lives in check.cpp (which includes cublasLt.h, cudnn.h and nccl.h), keeping this header cheap
// for every includer.
#include <cuda_runtime.h>

#include "megatron/core/error.h"

namespace megatron::cuda::detail {

[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int status, const char* call, const char* file, int line);
// NCCL's message also carries ncclGetLastError() (the reason NCCL logged, if any).
[[noreturn]] void throw_nccl_error(int status, const char* call, const char* file, int line);

}  // namespace megatron::cuda::detail

#define MT_CUDA_CHECK(call)                                                     \
  do {                                                                          \
    const cudaError_t mt_status_ = (call);                                      \
    if (mt_status_ != cudaSuccess)                                              \
      ::megatron::throw_check_failure(                                          \
          #call, __FILE__, __LINE__,                                            \
          ::megatron::concat("CUDA error ", cudaGetErrorName(mt_status_), ": ", \
                             cudaGetErrorString(mt_status_)));                  \
  } while (0)

// cublasStatus_t (cuBLAS and cuBLASLt share it).
#define MT_CUBLAS_CHECK(call)                                                              \
  do {                                                                                     \
    const int mt_status_ = static_cast<int>(call);                                         \
    if (mt_status_ != 0)                                                                   \
      ::megatron::cuda::detail::throw_cublas_error(mt_status_, #call, __FILE__, __LINE__); \
  } while (0)

// cudnnStatus_t.
#define MT_CUDNN_CHECK(call)                                                              \
  do {                                                                                    \
    const int mt_status_ = static_cast<int>(call);                                        \
    if (mt_status_ != 0)                                                                  \
      ::megatron::cuda::detail::throw_cudnn_error(mt_status_, #call, __FILE__, __LINE__); \
  } while (0)

// ncclResult_t. ncclInProgress (non-blocking communicators) is not an error.
#define MT_NCCL_CHECK(call)                                                              \
  do {                                                                                   \
    const int mt_status_ = static_cast<int>(call);                                       \
    if (mt_status_ != 0 && mt_status_ != 7 /* ncclInProgress */)                         \
      ::megatron::cuda::detail::throw_nccl_error(mt_status_, #call, __FILE__, __LINE__); \
  } while (0)
