// CPU backend: linear layers, norms, activations, embeddings, elementwise, casts, the optimizer
// step.
#include "megatron/backend/cpu_ops.h"

#include "megatron/backend/op_impl.h"

namespace megatron::ops {
using namespace impl;

void CpuOps::linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) const {
  const char* op = "linear_forward";
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  const FloatArgs fa(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y", Role::T, kWritten}});
  detail::linear_forward_cpu(fa, x, w, b, y, n, in, out);
}

void CpuOps::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                             Tensor* dw, Tensor* db) const {
  const char* op = "linear_backward";
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w"},
                          {&dy, "dy"},
                          {dx, "dx", Role::T, kWritten},
                          {dw, "dw", Role::TorF32, kUpdated},
                          {db, "db", Role::F32, kWritten}});
  detail::linear_backward_cpu(fa, x, w, dy, dx, dw, db, n, in, out);
}

void CpuOps::layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps,
                               Tensor& y, Tensor& mean, Tensor& rstd) const {
  const char* op = "layernorm_forward";
  const int64_t d = w.numel(), n = rows_of(x, d);
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&b, "b", Role::TorF32},
                          {&y, "y", Role::T, kWritten},
                          {&mean, "mean", Role::F32, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor w32 = as_fp32(w), b32 = as_fp32(b);
        cpu::layernorm_forward(x.data<T>(), w32.data<float>(), b32.data<float>(), y.data<T>(),
                               mean.data<float>(), rstd.data<float>(), n, d, eps);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::layernorm_forward(f.in(x), f.in(w), f.in(b), f.out(y), f.out(mean), f.out(rstd), n, d, eps);
  f.finish();
}

void CpuOps::layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw,
                                Tensor& db) const {
  const char* op = "layernorm_backward";
  const int64_t d = w.numel(), n = rows_of(x, d);
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&mean, "mean", Role::F32},
                          {&rstd, "rstd", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dw, "dw", Role::F32, kUpdated},
                          {&db, "db", Role::F32, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor w32 = as_fp32(w);
        cpu::layernorm_backward(x.data<T>(), w32.data<float>(), mean.data<float>(),
                                rstd.data<float>(), dy.data<T>(), dx.data<T>(), dw.data<float>(),
                                db.data<float>(), n, d);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::layernorm_backward(f.in(x), f.in(w), f.in(mean), f.in(rstd), f.in(dy), f.out(dx), f.out(dw),
                          f.out(db), n, d);
  f.finish();
}

void CpuOps::rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y,
                             Tensor& rstd) const {
  const char* op = "rmsnorm_forward";
  const int64_t d = w.numel(), n = rows_of(x, d);
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&y, "y", Role::T, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor w32 = as_fp32(w);
        cpu::rmsnorm_forward(x.data<T>(), w32.data<float>(), y.data<T>(), rstd.data<float>(), n, d,
                             eps);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::rmsnorm_forward(f.in(x), f.in(w), f.out(y), f.out(rstd), n, d, eps);
  f.finish();
}

void CpuOps::rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd,
                              const Tensor& dy, Tensor& dx, Tensor& dw) const {
  const char* op = "rmsnorm_backward";
  const int64_t d = w.numel(), n = rows_of(x, d);
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&rstd, "rstd", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dw, "dw", Role::F32, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor w32 = as_fp32(w);
        cpu::rmsnorm_backward(x.data<T>(), w32.data<float>(), rstd.data<float>(), dy.data<T>(),
                              dx.data<T>(), dw.data<float>(), n, d);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::rmsnorm_backward(f.in(x), f.in(w), f.in(rstd), f.in(dy), f.out(dx), f.out(dw), n, d);
  f.finish();
}

void CpuOps::qk_rmsnorm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk, float eps,
                                int64_t q_slots, Tensor& y, Tensor& rstd) const {
  const char* op = "qk_rmsnorm_forward";
  const int64_t Dh = wq.numel(), groups = x.numel() / Dh / (q_slots + 2);
  const FloatArgs fa(op, {{&x, "x"},
                          {&wq, "wq", Role::TorF32},
                          {&wk, "wk", Role::TorF32},
                          {&y, "y", Role::T, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor q32 = as_fp32(wq), k32 = as_fp32(wk);
        cpu::qk_rmsnorm_forward(x.data<T>(), q32.data<float>(), k32.data<float>(), y.data<T>(),
                                rstd.data<float>(), groups, q_slots, Dh, eps);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::qk_rmsnorm_forward(f.in(x), f.in(wq), f.in(wk), f.out(y), f.out(rstd), groups, q_slots, Dh,
                          eps);
  f.finish();
}

void CpuOps::qk_rmsnorm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                 const Tensor& rstd, const Tensor& dy, int64_t q_slots, Tensor& dx,
                                 Tensor& dwq, Tensor& dwk) const {
  const char* op = "qk_rmsnorm_backward";
  const int64_t Dh = wq.numel(), groups = x.numel() / Dh / (q_slots + 2);
  const FloatArgs fa(op, {{&x, "x"},
                          {&wq, "wq", Role::TorF32},
                          {&wk, "wk", Role::TorF32},
                          {&rstd, "rstd", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dwq, "dwq", Role::F32, kUpdated},
                          {&dwk, "dwk", Role::F32, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor q32 = as_fp32(wq), k32 = as_fp32(wk);
        cpu::qk_rmsnorm_backward(x.data<T>(), q32.data<float>(), k32.data<float>(),
                                 rstd.data<float>(), dy.data<T>(), dx.data<T>(), dwq.data<float>(),
                                 dwk.data<float>(), groups, q_slots, Dh);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::qk_rmsnorm_backward(f.in(x), f.in(wq), f.in(wk), f.in(rstd), f.in(dy), f.out(dx), f.out(dwq),
                           f.out(dwk), groups, q_slots, Dh);
  f.finish();
}

void CpuOps::qk_projection_sums(const Tensor& x, const Tensor* dy, const Tensor& wq,
                                const Tensor& wk, const kernels::QkProjection& p,
                                Tensor& sums) const {
  const char* op = "qk_projection_sums";
  const FloatArgs fa(op, {{&x, "x"},
                          {dy, "dy"},
                          {&wq, "wq", Role::TorF32},
                          {&wk, "wk", Role::TorF32},
                          {&sums, "sums", Role::F32, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor q32 = as_fp32(wq), k32 = as_fp32(wk);
        cpu::qk_projection_sums(x.data<T>(), dy ? dy->data<T>() : nullptr, q32.data<float>(),
                                k32.data<float>(), sums.data<float>(), p);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::qk_projection_sums(f.in(x), f.in(dy), f.in(wq), f.in(wk), f.out(sums), p);
  f.finish();
}

void CpuOps::qk_projection_norm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                        const Tensor& sums, const kernels::QkProjection& p,
                                        Tensor& y, Tensor& rstd) const {
  const char* op = "qk_projection_norm_forward";
  const FloatArgs fa(op, {{&x, "x"},
                          {&wq, "wq", Role::TorF32},
                          {&wk, "wk", Role::TorF32},
                          {&sums, "sums", Role::F32},
                          {&y, "y", Role::T, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor q32 = as_fp32(wq), k32 = as_fp32(wk);
        cpu::qk_projection_norm_forward(x.data<T>(), q32.data<float>(), k32.data<float>(),
                                        sums.data<float>(), y.data<T>(), rstd.data<float>(), p);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::qk_projection_norm_forward(f.in(x), f.in(wq), f.in(wk), f.in(sums), f.out(y), f.out(rstd),
                                  p);
  f.finish();
}

void CpuOps::qk_projection_norm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                         const Tensor& rstd, const Tensor& dots, const Tensor& dy,
                                         const kernels::QkProjection& p, Tensor& dx, Tensor& dwq,
                                         Tensor& dwk) const {
  const char* op = "qk_projection_norm_backward";
  const FloatArgs fa(op, {{&x, "x"},
                          {&wq, "wq", Role::TorF32},
                          {&wk, "wk", Role::TorF32},
                          {&rstd, "rstd", Role::F32},
                          {&dots, "dots", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dwq, "dwq", Role::F32, kUpdated},
                          {&dwk, "dwk", Role::F32, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        const Tensor q32 = as_fp32(wq), k32 = as_fp32(wk);
        cpu::qk_projection_norm_backward(x.data<T>(), q32.data<float>(), k32.data<float>(),
                                         rstd.data<float>(), dots.data<float>(), dy.data<T>(),
                                         dx.data<T>(), dwq.data<float>(), dwk.data<float>(), p);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::qk_projection_norm_backward(f.in(x), f.in(wq), f.in(wk), f.in(rstd), f.in(dots), f.in(dy),
                                   f.out(dx), f.out(dwq), f.out(dwk), p);
  f.finish();
}

void CpuOps::gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind) const {
  const char* op = "gelu_forward";
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::gelu_forward(x.data<T>(), y.data<T>(), x.numel(), kind);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::gelu_forward(f.in(x), f.out(y), x.numel(), kind);
  f.finish();
}

void CpuOps::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind) const {
  const char* op = "gelu_backward";
  const FloatArgs fa(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::gelu_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), x.numel(), kind);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::gelu_backward(f.in(x), f.in(dy), f.out(dx), x.numel(), kind);
  f.finish();
}

void CpuOps::tanh_forward(const Tensor& x, Tensor& y) const {
  const char* op = "tanh_forward";
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::tanh_forward(f.in(x), f.out(y), x.numel());
  f.finish();
}

void CpuOps::tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) const {
  const char* op = "tanh_backward";
  const FloatArgs fa(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  Fp32OnCpu f(fa);
  cpu::tanh_backward(f.in(y), f.in(dy), f.out(dx), y.numel());
  f.finish();
}

void CpuOps::glu_forward(const Tensor& x, Tensor& y, math::Glu gate) const {
  const char* op = "glu_forward";
  const int64_t fdim = last_dim(y), n = rows_of(y, fdim);
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  if (run_as_stored(
          fa.t(), [&]<typename T>() { cpu::glu_forward(x.data<T>(), y.data<T>(), n, fdim, gate); }))
    return;
  Fp32OnCpu f(fa);
  cpu::glu_forward(f.in(x), f.out(y), n, fdim, gate);
  f.finish();
}

void CpuOps::glu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Glu gate) const {
  const char* op = "glu_backward";
  const int64_t fdim = last_dim(dy), n = rows_of(dy, fdim);
  const FloatArgs fa(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::glu_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), n, fdim, gate);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::glu_backward(f.in(x), f.in(dy), f.out(dx), n, fdim, gate);
  f.finish();
}

void CpuOps::embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start,
                               Tensor& out) const {
  const char* op = "embedding_forward";
  const int64_t d = table.dim(1);
  const FloatArgs fa(op, {{&table, "table"}, {&out, "out", Role::T, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::embedding_forward(ids.data<int32_t>(), ids.numel(), table.data<T>(), vocab_start,
                               table.dim(0), d, out.data<T>());
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::embedding_forward(ids.data<int32_t>(), ids.numel(), f.in(table), vocab_start, table.dim(0),
                         d, f.out(out));
  f.finish();
}

void CpuOps::embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start,
                                Tensor& dtable) const {
  const char* op = "embedding_backward";
  const int64_t d = dtable.dim(1);
  const FloatArgs fa(op, {{&dout, "dout"}, {&dtable, "dtable", Role::F32, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::embedding_backward(ids.data<int32_t>(), ids.numel(), dout.data<T>(), vocab_start,
                                dtable.dim(0), d, dtable.data<float>());
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::embedding_backward(ids.data<int32_t>(), ids.numel(), f.in(dout), vocab_start, dtable.dim(0),
                          d, f.out(dtable));
  f.finish();
}

void CpuOps::add(const Tensor& a, const Tensor& b, Tensor& out) const {
  const char* op = "add";
  const FloatArgs fa(op, {{&a, "a"}, {&b, "b"}, {&out, "out", Role::T, kWritten}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::add(f.in(a), f.in(b), f.out(out), a.numel());
  f.finish();
}

void CpuOps::add_bias(Tensor& y, const Tensor& bias) const {
  const char* op = "add_bias";
  const int64_t n = bias.numel(), rows = rows_of(y, n);
  const FloatArgs fa(op, {{&y, "y", Role::T, kUpdated}, {&bias, "bias"}});
  if (run_as_stored(fa.t(), [&]<typename T>() {
        for (int64_t r = 0; r < rows; ++r) cpu::add_inplace(y.data<T>() + r * n, bias.data<T>(), n);
      }))
    return;
  Fp32OnCpu f(fa);
  for (int64_t r = 0; r < rows; ++r) cpu::add_inplace(f.out(y) + r * n, f.in(bias), n);
  f.finish();
}

void CpuOps::add_inplace(Tensor& acc, const Tensor& x) const {
  const char* op = "add_inplace";
  const FloatArgs fa(op, {{&x, "x"}, {&acc, "acc", Role::TorF32, kUpdated}});
  // The accumulator is x's type, or fp32 (a bf16 gradient added into an fp32 one).
  const bool fp32_acc = acc.dtype() == DType::F32;
  if (run_as_stored(fa.t(), [&]<typename T>() {
        if (fp32_acc)
          cpu::add_inplace(acc.data<float>(), x.data<T>(), acc.numel());
        else
          cpu::add_inplace(acc.data<T>(), x.data<T>(), acc.numel());
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::add_inplace(f.out(acc), f.in(x), acc.numel());
  f.finish();
}

void CpuOps::scale_inplace(Tensor& x, float s) const {
  const char* op = "scale_inplace";
  const FloatArgs fa(op, {{&x, "x", Role::T, kUpdated}});
  if (run_as_stored(fa.t(), [&]<typename T>() { cpu::scale_inplace(x.data<T>(), s, x.numel()); }))
    return;
  Fp32OnCpu f(fa);
  cpu::scale_inplace(f.out(x), s, x.numel());
  f.finish();
}

void CpuOps::fill(Tensor& x, float v) const {
  const char* op = "fill";
  const FloatArgs fa(op, {{&x, "x", Role::T, kWritten}});
  dispatch_float_storage(x.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(x.raw());
    for (int64_t i = 0; i < x.numel(); ++i) store<T>(p, i, v);
  });
}

void CpuOps::cast(const Tensor& src, Tensor& dst) const {
  for (const Arg& a : {Arg{&src, "src"}, Arg{&dst, "dst"}}) {
    const DType t = a.t->dtype();
    MT_CHECK(t == DType::F32 || t == DType::BF16 || t == DType::F16, "cast: ", a.name,
             " must be fp32, bf16 or fp16, got ", dtype_name(t));
  }
  const int64_t n = src.numel();
  if (src.dtype() == DType::BF16 && dst.dtype() == DType::F32)
    return cpu::bf16_to_f32(src.data<bf16_t>(), dst.data<float>(), n);
  if (src.dtype() == DType::F32 && dst.dtype() == DType::BF16)
    return cpu::f32_to_bf16(src.data<float>(), dst.data<bf16_t>(), n);
  dispatch_float_storage(src.dtype(), [&]<typename S>() {
    dispatch_float_storage(dst.dtype(), [&]<typename D>() {
      const S* in = static_cast<const S*>(src.raw());
      D* out = static_cast<D*>(dst.raw());
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) store<D>(out, i, load<S>(in, i));
    });
  });
}

void CpuOps::adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                        const math::AdamWParams& p) const {
  const char* op = "adamw_step";
  const FloatArgs fa(op, {{&param, "param", Role::F32},
                          {&grad, "grad", Role::F32},
                          {&m, "m", Role::F32},
                          {&v, "v", Role::F32}});
  cpu::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                  param.numel(), p);
}

int64_t CpuOps::count_outside(const Tensor& x, float limit) const {
  const char* op = "count_outside";
  const FloatArgs fa(op, {{&x, "x"}});
  const Fp32OnCpu f(fa);
  return cpu::count_outside(f.in(x), x.numel(), limit);
}

double CpuOps::sum_squares(const Tensor& x) const {
  const char* op = "sum_squares";
  const FloatArgs fa(op, {{&x, "x"}});
  const Fp32OnCpu f(fa);
  return cpu::sum_squares(f.in(x), x.numel());
}

double CpuOps::sum_squares_of(const std::vector<Tensor>& xs) const {
  double total = 0.0;
  for (const Tensor& x : xs) total += sum_squares(x);
  return total;
}

}  // namespace megatron::ops
