// The CUDA backend's mixture-of-experts ops (backend/ops.h; front end in ops_moe.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/moe_rows.h"
#include "kernels/cuda/storage_type.h"
#include "megatron/backend/cuda/ops_cuda.h"
#include "megatron/backend/cuda/ops_cuda_util.h"
#include "megatron/backend/cuda/runtime.h"

namespace megatron::ops::cuda_backend {
namespace kc = kernels::cuda;

using detail::expect;
using detail::ptr;
using detail::stream;

void CudaOps::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) const {
  const int64_t D = src.dim(src.ndim() - 1);
  kc::gather_rows(src.raw(), src.numel() / D, ptr<int32_t>(index), index.numel(),
                  static_cast<size_t>(D) * dtype_size(src.dtype()), out.raw(), stream());
}

void CudaOps::scatter_rows(const Tensor& src, const Tensor& index, Tensor& out) const {
  const int64_t D = out.dim(out.ndim() - 1);
  kc::scatter_rows(src.raw(), ptr<int32_t>(index), index.numel(), out.numel() / D,
                   static_cast<size_t>(D) * dtype_size(src.dtype()), out.raw(), stream());
}

void CudaOps::moe_combine(const Tensor& rows, const Tensor* index, const Tensor* gates,
                          int64_t topk, Tensor& out) const {
  const char* op = "moe_combine";
  const int64_t D = out.dim(out.ndim() - 1), tokens = out.numel() / D;
  if (gates) expect(op, *gates, "gates", DType::F32);
  const int32_t* idx = index ? ptr<int32_t>(*index) : nullptr;
  const float* g = gates ? ptr<float>(*gates) : nullptr;
  kc::with_storage_type(rows.dtype(), op, "rows", [&]<typename T>() {
    if (out.dtype() == DType::F32) {
      kc::moe_combine<T, float>(ptr<T>(rows), rows.numel() / D, idx, g, tokens, topk, D,
                                ptr<float>(out), stream());
      return;
    }
    expect(op, out, "out", kc::dtype_of<T>());
    kc::moe_combine<T, T>(ptr<T>(rows), rows.numel() / D, idx, g, tokens, topk, D, ptr<T>(out),
                          stream());
  });
}

void CudaOps::moe_combine_backward(const Tensor& rows, const Tensor& gates, const Tensor& dy,
                                   int64_t topk, Tensor& d_rows, Tensor& d_gates) const {
  const char* op = "moe_combine_backward";
  expect(op, gates, "gates", DType::F32);
  expect(op, d_gates, "d_gates", DType::F32);
  const int64_t D = dy.dim(dy.ndim() - 1), tokens = dy.numel() / D;
  kc::with_storage_type(rows.dtype(), op, "rows", [&]<typename T>() {
    expect(op, dy, "dy", kc::dtype_of<T>());
    expect(op, d_rows, "d_rows", kc::dtype_of<T>());
    kc::moe_combine_backward<T>(ptr<T>(rows), ptr<float>(gates), ptr<T>(dy), tokens, topk, D,
                                ptr<T>(d_rows), ptr<float>(d_gates), stream());
  });
}

}  // namespace megatron::ops::cuda_backend
