#include "megatron/backend/linear_cpu.h"

#include "kernels/cpu/gemm.h"

namespace megatron::ops::detail {
namespace cpu = kernels::cpu;

namespace {
bool native_bf16(const FloatArgs& fa) { return fa.t() == DType::BF16 && cpu::native_bf16_gemm(); }
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
  Fp32OnCpu f(fa);
  cpu::gemm(false, true, n, out, in, 1.0f, f.in(x), in, f.in(w), in, 0.0f, f.out(y), out, f.in(b));
  f.finish();
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
  Fp32OnCpu f(fa);
  if (dx)
    cpu::gemm(false, false, n, in, out, 1.0f, f.in(dy), out, f.in(w), in, 0.0f, f.out(dx), in);
  if (dw) cpu::gemm(true, false, out, in, n, 1.0f, f.in(dy), out, f.in(x), in, 1.0f, f.out(dw), in);
  if (db) cpu::bias_grad(f.in(dy), n, out, f.out(db));
  f.finish();
}

}  // namespace megatron::ops::detail
