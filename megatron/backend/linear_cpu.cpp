#include "megatron/backend/linear_cpu.h"

#include <algorithm>

#include "kernels/cpu/gemm.h"
#include "megatron/backend/ops.h"

namespace megatron::ops::detail {
namespace cpu = kernels::cpu;

namespace {

bool native_bf16(const FloatArgs& fa) { return fa.t() == DType::BF16 && cpu::native_bf16_gemm(); }

// 16-bit linear layers without native GEMMs (fp16; bf16 on a CPU without bf16 instructions) run
// the fp32 GEMMs on blocks of rows (kernels::cpu::widened_gemm_block_rows) instead of widening
// whole tensors: the fp32 scratch stays bounded (the output layer's logits alone are tokens x
// vocabulary) and a narrow layer's block is still in cache when the GEMM reads it. The weight is
// widened once per call.

// Rows [r0, r0 + m) of a [rows, width] tensor.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t m, int64_t width) {
  return t.flat_view(r0 * width, {m, width});
}

void forward_in_row_blocks(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, int64_t n,
                           int64_t in, int64_t out) {
  const Tensor w32 = as_fp32(w);
  const Tensor b32 = b ? as_fp32(*b) : Tensor();
  const int64_t mb = cpu::widened_gemm_block_rows(n, in, out);
  Tensor x32 = Tensor::empty({mb, in}, DType::F32), y32 = Tensor::empty({mb, out}, DType::F32);
  for (int64_t r0 = 0; r0 < n; r0 += mb) {
    const int64_t m = std::min(mb, n - r0);
    Tensor xb = x32.flat_view(0, {m, in}), yb = y32.flat_view(0, {m, out});
    cast(rows_of(x, r0, m, in), xb);
    cpu::gemm(false, true, m, out, in, 1.0f, xb.data<float>(), in, w32.data<float>(), in, 0.0f,
              yb.data<float>(), out, b ? b32.data<float>() : nullptr);
    Tensor yr = rows_of(y, r0, m, out);
    cast(yb, yr);
  }
}

void backward_in_row_blocks(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                            Tensor* dw, Tensor* db, int64_t n, int64_t in, int64_t out) {
  const Tensor w32 = dx ? as_fp32(w) : Tensor();
  Tensor dw32 = dw ? as_fp32(*dw) : Tensor();
  const int64_t mb = cpu::widened_gemm_block_rows(n, in, out);
  Tensor dy32 = Tensor::empty({mb, out}, DType::F32);
  Tensor in32 = Tensor::empty({mb, in}, DType::F32);  // x's rows, then dx's
  for (int64_t r0 = 0; r0 < n; r0 += mb) {
    const int64_t m = std::min(mb, n - r0);
    Tensor dyb = dy32.flat_view(0, {m, out}), inb = in32.flat_view(0, {m, in});
    cast(rows_of(dy, r0, m, out), dyb);
    if (db) cpu::bias_grad(dyb.data<float>(), m, out, db->data<float>());
    if (dw) {
      cast(rows_of(x, r0, m, in), inb);
      cpu::gemm(true, false, out, in, m, 1.0f, dyb.data<float>(), out, inb.data<float>(), in, 1.0f,
                dw32.data<float>(), in);
    }
    if (dx) {
      cpu::gemm(false, false, m, in, out, 1.0f, dyb.data<float>(), out, w32.data<float>(), in, 0.0f,
                inb.data<float>(), in);
      Tensor dxr = rows_of(*dx, r0, m, in);
      cast(inb, dxr);
    }
  }
  if (dw && dw->dtype() != DType::F32) cast(dw32, *dw);
}

}  // namespace

void linear_forward_cpu(const FloatArgs& fa, const Tensor& x, const Tensor& w, const Tensor* b,
                        Tensor& y, int64_t n, int64_t in, int64_t out) {
  if (native_bf16(fa)) {
    cpu::Bf16Gemm g;
    g.trans_b = true;
    g.M = n, g.N = out, g.K = in;
    g.A = x.data<bf16_t>(), g.lda = in;
    g.B = w.data<bf16_t>(), g.ldb = in;
    g.C = y.raw(), g.c_dtype = DType::BF16, g.ldc = out;
    if (b) g.bias = b->raw(), g.bias_dtype = b->dtype();
    cpu::gemm_bf16(g);
    return;
  }
  if (fa.t() != DType::F32) return forward_in_row_blocks(x, w, b, y, n, in, out);
  cpu::gemm(false, true, n, out, in, 1.0f, x.data<float>(), in, w.data<float>(), in, 0.0f,
            y.data<float>(), out, b ? b->data<float>() : nullptr);
}

void linear_backward_cpu(const FloatArgs& fa, const Tensor& x, const Tensor& w, const Tensor& dy,
                         Tensor* dx, Tensor* dw, Tensor* db, int64_t n, int64_t in, int64_t out) {
  if (native_bf16(fa)) {
    const bf16_t* dy16 = dy.data<bf16_t>();
    if (dx) {
      cpu::Bf16Gemm g;
      g.M = n, g.N = in, g.K = out;
      g.A = dy16, g.lda = out;
      g.B = w.data<bf16_t>(), g.ldb = in;
      g.C = dx->raw(), g.c_dtype = DType::BF16, g.ldc = in;
      cpu::gemm_bf16(g);
    }
    if (dw && n > 0) {
      cpu::Bf16Gemm g;
      g.trans_a = true;
      g.M = out, g.N = in, g.K = n;
      g.A = dy16, g.lda = out;
      g.B = x.data<bf16_t>(), g.ldb = in;
      g.C = dw->raw(), g.c_dtype = dw->dtype(), g.ldc = in;
      g.accumulate = true;
      cpu::gemm_bf16(g);
    }
    if (db) cpu::bias_grad(dy16, n, out, db->data<float>());
    return;
  }
  if (fa.t() != DType::F32) return backward_in_row_blocks(x, w, dy, dx, dw, db, n, in, out);
  if (dx)
    cpu::gemm(false, false, n, in, out, 1.0f, dy.data<float>(), out, w.data<float>(), in, 0.0f,
              dx->data<float>(), in);
  if (dw)
    cpu::gemm(true, false, out, in, n, 1.0f, dy.data<float>(), out, x.data<float>(), in, 1.0f,
              dw->data<float>(), in);
  if (db) cpu::bias_grad(dy.data<float>(), n, out, db->data<float>());
}

}  // namespace megatron::ops::detail
