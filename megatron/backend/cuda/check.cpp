#include "megatron/backend/cuda/check.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <nccl.h>

#include <string>

namespace megatron::cuda::detail {

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  const auto s = static_cast<cublasStatus_t>(status);
  throw_check_failure(call, file, line,
                      concat("cuBLAS error ", cublasLtGetStatusName(s), " (", status,
                             "): ", cublasLtGetStatusString(s)));
}

void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  char detail[1024] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));  // cuDNN's own reason, often more specific
  std::string message = concat(
      "cuDNN error ", cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), " (", status, ")");
  if (detail[0] != '\0') message += concat(": ", detail);
  throw_check_failure(call, file, line, message);
}

void throw_nccl_error(int status, const char* call, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  std::string message = concat("NCCL error ", ncclGetErrorString(static_cast<ncclResult_t>(status)),
                               " (", status, ")");
  if (last != nullptr && last[0] != '\0') message += concat(": ", last);
  throw_check_failure(call, file, line, message);
}

}  // namespace megatron::cuda::detail
