#pragma once
// The CPU half of ops::linear_forward/linear_backward (internal to backend/ops.cpp), called after
// the device, shape and dtype checks. bf16 runs natively (bf16 GEMM inputs, fp32 accumulation,
// one rounding of each bf16 output) when the CPU has bf16 instructions and oneDNN a kernel for
// them (kernels::cpu::native_bf16_gemm); otherwise the 16-bit tensors are widened to fp32 a block
// of rows at a time (the weight once per call) for the fp32 GEMMs.
#include <cstdint>

#include "megatron/backend/float_args.h"
#include "megatron/core/tensor.h"

namespace megatron::ops::detail {

// y[n,out] = x[n,in] @ w[out,in]^T (+ b)
void linear_forward_cpu(const FloatArgs& fa, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y, int64_t n, int64_t in, int64_t out);
// dx = dy @ w; dw += dy^T @ x; db += column sums of dy
void linear_backward_cpu(const FloatArgs& fa, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor* dw, Tensor* db, int64_t n, int64_t in, int64_t out);

}  // namespace megatron::ops::detail
