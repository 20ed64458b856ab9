// CPU backend: the mixture-of-experts row movement and gated sums.
#include "kernels/cpu/moe_rows.h"
#include "megatron/backend/cpu_ops.h"
#include "megatron/backend/op_impl.h"

namespace megatron::ops {
using namespace impl;

void CpuOps::gather_rows(const Tensor& src, const Tensor& index, Tensor& out) const {
  const int64_t D = last_dim(src), n = rows_of(src, D), m = index.numel();
  cpu::gather_rows(src.raw(), n, index.data<int32_t>(), m,
                   static_cast<size_t>(D) * dtype_size(src.dtype()), out.raw());
}

void CpuOps::scatter_rows(const Tensor& src, const Tensor& index, Tensor& out) const {
  const int64_t D = last_dim(out), n = rows_of(out, D), m = index.numel();
  cpu::scatter_rows(src.raw(), index.data<int32_t>(), m, n,
                    static_cast<size_t>(D) * dtype_size(src.dtype()), out.raw());
}

void CpuOps::moe_combine(const Tensor& rows, const Tensor* index, const Tensor* gates, int64_t topk,
                         Tensor& out) const {
  const char* op = "moe_combine";
  const int64_t D = last_dim(out), T = rows_of(out, D), R = rows_of(rows, D);
  const FloatArgs fa(
      op, {{&rows, "rows"}, {gates, "gates", Role::F32}, {&out, "out", Role::TorF32, kWritten}});
  Fp32OnCpu f(fa);
  cpu::moe_combine(f.in(rows), R, index ? index->data<int32_t>() : nullptr, f.in(gates), T, topk, D,
                   f.out(out));
  f.finish();
}

void CpuOps::moe_combine_backward(const Tensor& rows, const Tensor& gates, const Tensor& dy,
                                  int64_t topk, Tensor& d_rows, Tensor& d_gates) const {
  const char* op = "moe_combine_backward";
  const int64_t D = last_dim(dy), T = rows_of(dy, D);
  const FloatArgs fa(op, {{&rows, "rows"},
                          {&gates, "gates", Role::F32},
                          {&dy, "dy"},
                          {&d_rows, "d_rows", Role::T, kWritten},
                          {&d_gates, "d_gates", Role::F32, kWritten}});
  Fp32OnCpu f(fa);
  cpu::moe_combine_backward(f.in(rows), f.in(gates), f.in(dy), T, topk, D, f.out(d_rows),
                            f.out(d_gates));
  f.finish();
}

}  // namespace megatron::ops
