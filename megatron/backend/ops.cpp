#include "megatron/backend/ops.h"

// Linear layers, norms, activations, embeddings, elementwise, casts, the optimizer step.
#include "megatron/backend/op_impl.h"

namespace megatron::ops {
using namespace impl;

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const char* op = "linear_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y"}});
  MT_CHECK(w.ndim() == 2, "linear_forward: weight must be 2-D, got ", w.shape().str());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(y.numel() == n * out, "linear_forward: output ", y.shape().str(), " != [", n, ", ", out,
           "]");
  if (b) MT_CHECK(b->numel() == out, "linear_forward: bias ", b->shape().str(), " != [", out, "]");
  const FloatArgs fa(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, linear_forward(x, w, b, y));
  detail::linear_forward_cpu(fa, x, w, b, y, n, in, out);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                     Tensor* db) {
  const char* op = "linear_backward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {dx, "dx"}, {dw, "dw"}, {db, "db"}});
  MT_CHECK(w.ndim() == 2, "linear_backward: weight must be 2-D, got ", w.shape().str());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(dy.numel() == n * out && (!dw || dw->numel() == out * in),
           "linear_backward: shape mismatch");
  if (dx) MT_CHECK(dx->numel() == n * in, "linear_backward: dx ", dx->shape().str());
  if (db) MT_CHECK(db->numel() == out, "linear_backward: db ", db->shape().str());
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w"},
                          {&dy, "dy"},
                          {dx, "dx", Role::T, kWritten},
                          {dw, "dw", Role::TorF32, kUpdated},
                          {db, "db", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, linear_backward(x, w, dy, dx, dw, db));
  detail::linear_backward_cpu(fa, x, w, dy, dx, dw, db, n, in, out);
}

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&b, "b"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(b.numel() == d && y.numel() == x.numel() && mean.numel() == n && rstd.numel() == n,
           "layernorm_forward: shape mismatch for x ", x.shape().str());
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&b, "b", Role::TorF32},
                          {&y, "y", Role::T, kWritten},
                          {&mean, "mean", Role::F32, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, layernorm_forward(x, w, b, eps, y, mean, rstd));
  const Tensor w32 = as_fp32(w), b32 = as_fp32(b);
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::layernorm_forward(x.data<T>(), w32.data<float>(), b32.data<float>(), y.data<T>(),
                               mean.data<float>(), rstd.data<float>(), n, d, eps);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::layernorm_forward(f.in(x), f.in(w), f.in(b), f.out(y), f.out(mean), f.out(rstd), n, d, eps);
  f.finish();
}

void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  const char* op = "layernorm_backward";
  const Device dev = device_of(op, {{&x, "x"},
                                    {&w, "w"},
                                    {&mean, "mean"},
                                    {&rstd, "rstd"},
                                    {&dy, "dy"},
                                    {&dx, "dx"},
                                    {&dw, "dw"},
                                    {&db, "db"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == d &&
               db.numel() == d && mean.numel() == n && rstd.numel() == n,
           "layernorm_backward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&mean, "mean", Role::F32},
                          {&rstd, "rstd", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dw, "dw", Role::F32, kUpdated},
                          {&db, "db", Role::F32, kUpdated}});
  MT_RUN_ON_CUDA(dev, layernorm_backward(x, w, mean, rstd, dy, dx, dw, db));
  const Tensor w32 = as_fp32(w);
  if (run_as_stored(fa.t(), [&]<typename T>() {
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

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(y.numel() == x.numel() && rstd.numel() == n, "rmsnorm_forward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&y, "y", Role::T, kWritten},
                          {&rstd, "rstd", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, rmsnorm_forward(x, w, eps, y, rstd));
  const Tensor w32 = as_fp32(w);
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::rmsnorm_forward(x.data<T>(), w32.data<float>(), y.data<T>(), rstd.data<float>(), n, d,
                             eps);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::rmsnorm_forward(f.in(x), f.in(w), f.out(y), f.out(rstd), n, d, eps);
  f.finish();
}

void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw) {
  const char* op = "rmsnorm_backward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&rstd, "rstd"}, {&dy, "dy"}, {&dx, "dx"}, {&dw, "dw"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(
      dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == d && rstd.numel() == n,
      "rmsnorm_backward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w", Role::TorF32},
                          {&rstd, "rstd", Role::F32},
                          {&dy, "dy"},
                          {&dx, "dx", Role::T, kWritten},
                          {&dw, "dw", Role::F32, kUpdated}});
  MT_RUN_ON_CUDA(dev, rmsnorm_backward(x, w, rstd, dy, dx, dw));
  const Tensor w32 = as_fp32(w);
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::rmsnorm_backward(x.data<T>(), w32.data<float>(), rstd.data<float>(), dy.data<T>(),
                              dx.data<T>(), dw.data<float>(), n, d);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::rmsnorm_backward(f.in(x), f.in(w), f.in(rstd), f.in(dy), f.out(dx), f.out(dw), n, d);
  f.finish();
}

void gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind) {
  const char* op = "gelu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "gelu_forward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, gelu_forward(x, y, kind));
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::gelu_forward(x.data<T>(), y.data<T>(), x.numel(), kind);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::gelu_forward(f.in(x), f.out(y), x.numel(), kind);
  f.finish();
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind) {
  const char* op = "gelu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel(), "gelu_backward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, gelu_backward(x, dy, dx, kind));
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::gelu_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), x.numel(), kind);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::gelu_backward(f.in(x), f.in(dy), f.out(dx), x.numel(), kind);
  f.finish();
}

void tanh_forward(const Tensor& x, Tensor& y) {
  const char* op = "tanh_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "tanh_forward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, tanh_forward(x, y));
  Fp32OnCpu f(fa);
  cpu::tanh_forward(f.in(x), f.out(y), x.numel());
  f.finish();
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const char* op = "tanh_backward";
  const Device dev = device_of(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == y.numel() && dx.numel() == y.numel(), "tanh_backward: shape mismatch");
  const FloatArgs fa(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, tanh_backward(y, dy, dx));
  Fp32OnCpu f(fa);
  cpu::tanh_backward(f.in(y), f.in(dy), f.out(dx), y.numel());
  f.finish();
}

void swiglu_forward(const Tensor& x, Tensor& y) {
  const char* op = "swiglu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  const int64_t fdim = last_dim(y), n = rows_of(y, fdim);
  MT_CHECK(x.numel() == 2 * y.numel(), "swiglu_forward: x must be [N, 2F] for y ", y.shape().str());
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, swiglu_forward(x, y));
  if (run_as_stored(fa.t(),
                    [&]<typename T>() { cpu::swiglu_forward(x.data<T>(), y.data<T>(), n, fdim); }))
    return;
  Fp32OnCpu f(fa);
  cpu::swiglu_forward(f.in(x), f.out(y), n, fdim);
  f.finish();
}

void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const char* op = "swiglu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  const int64_t fdim = last_dim(dy), n = rows_of(dy, fdim);
  MT_CHECK(x.numel() == 2 * dy.numel() && dx.numel() == x.numel(), "swiglu_backward: shapes");
  const FloatArgs fa(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, swiglu_backward(x, dy, dx));
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::swiglu_backward(x.data<T>(), dy.data<T>(), dx.data<T>(), n, fdim);
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::swiglu_backward(f.in(x), f.in(dy), f.out(dx), n, fdim);
  f.finish();
}

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding_forward";
  const Device dev = device_of(op, {{&ids, "ids"}, {&table, "table"}, {&out, "out"}});
  require_i32(op, ids, "ids");
  MT_CHECK(table.ndim() == 2, "embedding_forward: table must be 2-D, got ", table.shape().str());
  const int64_t d = table.dim(1);
  MT_CHECK(out.numel() == ids.numel() * d, "embedding_forward: out ", out.shape().str());
  const FloatArgs fa(op, {{&table, "table"}, {&out, "out", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, embedding_forward(ids, table, vocab_start, out));
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

void embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start,
                        Tensor& dtable) {
  const char* op = "embedding_backward";
  const Device dev = device_of(op, {{&ids, "ids"}, {&dout, "dout"}, {&dtable, "dtable"}});
  require_i32(op, ids, "ids");
  MT_CHECK(dtable.ndim() == 2, "embedding_backward: dtable must be 2-D, got ",
           dtable.shape().str());
  const int64_t d = dtable.dim(1);
  MT_CHECK(dout.numel() == ids.numel() * d, "embedding_backward: dout ", dout.shape().str());
  const FloatArgs fa(op, {{&dout, "dout"}, {&dtable, "dtable", Role::F32, kUpdated}});
  MT_RUN_ON_CUDA(dev, embedding_backward(ids, dout, vocab_start, dtable));
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

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device dev = device_of(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  MT_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shape mismatch ",
           a.shape().str(), " + ", b.shape().str());
  const FloatArgs fa(op, {{&a, "a"}, {&b, "b"}, {&out, "out", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, add(a, b, out));
  if (run_as_stored(fa.t(), [&]<typename T>() {
        cpu::add(a.data<T>(), b.data<T>(), out.data<T>(), a.numel());
      }))
    return;
  Fp32OnCpu f(fa);
  cpu::add(f.in(a), f.in(b), f.out(out), a.numel());
  f.finish();
}

void add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "add_bias";
  const Device dev = device_of(op, {{&y, "y"}, {&bias, "bias"}});
  const int64_t n = bias.numel(), rows = rows_of(y, n);
  const FloatArgs fa(op, {{&y, "y", Role::T, kUpdated}, {&bias, "bias"}});
  MT_RUN_ON_CUDA(dev, add_bias(y, bias));
  if (run_as_stored(fa.t(), [&]<typename T>() {
        for (int64_t r = 0; r < rows; ++r) cpu::add_inplace(y.data<T>() + r * n, bias.data<T>(), n);
      }))
    return;
  Fp32OnCpu f(fa);
  for (int64_t r = 0; r < rows; ++r) cpu::add_inplace(f.out(y) + r * n, f.in(bias), n);
  f.finish();
}

void add_inplace(Tensor& acc, const Tensor& x) {
  const char* op = "add_inplace";
  const Device dev = device_of(op, {{&acc, "acc"}, {&x, "x"}});
  MT_CHECK(acc.numel() == x.numel(), "add_inplace: shape mismatch ", acc.shape().str(),
           " += ", x.shape().str());
  const FloatArgs fa(op, {{&x, "x"}, {&acc, "acc", Role::TorF32, kUpdated}});
  MT_RUN_ON_CUDA(dev, add_inplace(acc, x));
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

void scale_inplace(Tensor& x, float s) {
  const char* op = "scale_inplace";
  const Device dev = device_of(op, {{&x, "x"}});
  const FloatArgs fa(op, {{&x, "x", Role::T, kUpdated}});
  MT_RUN_ON_CUDA(dev, scale_inplace(x, s));
  if (run_as_stored(fa.t(), [&]<typename T>() { cpu::scale_inplace(x.data<T>(), s, x.numel()); }))
    return;
  Fp32OnCpu f(fa);
  cpu::scale_inplace(f.out(x), s, x.numel());
  f.finish();
}

void fill(Tensor& x, float v) {
  const char* op = "fill";
  const Device dev = device_of(op, {{&x, "x"}});
  const FloatArgs fa(op, {{&x, "x", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, fill(x, v));
  dispatch_float_storage(x.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(x.raw());
    for (int64_t i = 0; i < x.numel(); ++i) store<T>(p, i, v);
  });
}

void cast(const Tensor& src, Tensor& dst) {
  const char* op = "cast";
  const Device dev = device_of(op, {{&src, "src"}, {&dst, "dst"}});
  MT_CHECK(src.numel() == dst.numel(), "cast: ", src.shape().str(), " into ", dst.shape().str());
  MT_RUN_ON_CUDA(dev, cast(src, dst));
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

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p) {
  const char* op = "adamw_step";
  const Device dev = device_of(op, {{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}});
  MT_CHECK(
      grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
      "adamw_step: state sizes differ from param ", param.shape().str());
  const FloatArgs fa(op, {{&param, "param", Role::F32},
                          {&grad, "grad", Role::F32},
                          {&m, "m", Role::F32},
                          {&v, "v", Role::F32}});
  MT_RUN_ON_CUDA(dev, adamw_step(param, grad, m, v, p));
  cpu::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                  param.numel(), p);
}

int64_t count_outside(const Tensor& x, float limit) {
  const char* op = "count_outside";
  const Device dev = device_of(op, {{&x, "x"}});
  const FloatArgs fa(op, {{&x, "x"}});
  MT_RUN_ON_CUDA(dev, count_outside(x, limit));
  const Fp32OnCpu f(fa);
  return cpu::count_outside(f.in(x), x.numel(), limit);
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  const Device dev = device_of(op, {{&x, "x"}});
  const FloatArgs fa(op, {{&x, "x"}});
  MT_RUN_ON_CUDA(dev, sum_squares(x));
  const Fp32OnCpu f(fa);
  return cpu::sum_squares(f.in(x), x.numel());
}

double sum_squares_of(const std::vector<Tensor>& xs) {
  if (xs.empty()) return 0.0;
  for (const Tensor& x : xs) {
    MT_CHECK(x.device() == xs.front().device() && x.dtype() == xs.front().dtype(),
             "sum_squares_of: tensors on ", device_name(x.device()), " (", dtype_name(x.dtype()),
             ") and ", device_name(xs.front().device()), " (", dtype_name(xs.front().dtype()),
             "); give one device and dtype");
    const FloatArgs fa("sum_squares_of", {{&x, "xs[i]"}});
  }
  const Device dev = device_of("sum_squares_of", {{&xs.front(), "xs"}});
  MT_RUN_ON_CUDA(dev, sum_squares_of(xs));
  double total = 0.0;
  for (const Tensor& x : xs) total += sum_squares(x);
  return total;
}

}  // namespace megatron::ops
