#pragma once
// Checked CUDA runtime calls: failures throw megatron::Error naming the call, file and line.
#include <cuda_runtime.h>

#include "megatron/core/error.h"

#define MT_CUDA_CHECK(call)                                                              \
  do {                                                                                   \
    const cudaError_t mt_status_ = (call);                                               \
    if (mt_status_ != cudaSuccess)                                                       \
      ::megatron::throw_check_failure(#call, __FILE__, __LINE__,                         \
                                      ::megatron::concat("CUDA error ",                  \
                                                         cudaGetErrorName(mt_status_), ": ", \
                                                         cudaGetErrorString(mt_status_))); \
  } while (0)
