// The ops' front end (device and shape checks, then the device's backend): linear layers, norms,
// activations, embeddings, elementwise, casts, the optimizer step.
#include "megatron/backend/op_checks.h"

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
  device_call(dev, op)->linear_forward(x, w, b, y);
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
  device_call(dev, op)->linear_backward(x, w, dy, dx, dw, db);
}

void linear_weight_grad(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dw,
                        Tensor* db) {
  MT_CHECK(dw || db, "linear_weight_grad: neither a weight nor a bias gradient");
  const int64_t out = dw ? dw->dim(0) : db->numel();
  MT_CHECK(out > 0 && dy.numel() % out == 0, "linear_weight_grad: dy ", dy.shape().str(),
           " does not split into rows of ", out);
  const int64_t rows = dy.numel() / out, in = rows > 0 ? x.numel() / rows : 0;
  MT_CHECK(!dw || (dw->ndim() == 2 && dw->dim(1) == in), "linear_weight_grad: dw ",
           dw ? dw->shape().str() : "", " for x ", x.shape().str());
  // Without dx the devices read only the weight's shape and dtype: a released weight gets a
  // stand-in that nothing touches.
  const Tensor w2 =
      w.raw() != nullptr ? w.view({out, in}) : Tensor::empty({out, in}, x.dtype(), x.device());
  linear_backward(x, w2, dy, nullptr, dw, db);
}

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&b, "b"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(b.numel() == d && y.numel() == x.numel() && mean.numel() == n && rstd.numel() == n,
           "layernorm_forward: shape mismatch for x ", x.shape().str());
  device_call(dev, op)->layernorm_forward(x, w, b, eps, y, mean, rstd);
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
  device_call(dev, op)->layernorm_backward(x, w, mean, rstd, dy, dx, dw, db);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(y.numel() == x.numel() && rstd.numel() == n, "rmsnorm_forward: shape mismatch");
  device_call(dev, op)->rmsnorm_forward(x, w, eps, y, rstd);
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
  device_call(dev, op)->rmsnorm_backward(x, w, rstd, dy, dx, dw);
}

namespace {
// The [groups, q_slots + 1] statistics of a qk_rmsnorm over x (checked shapes).
int64_t qk_norm_stats(const char* op, const Tensor& x, const Tensor& wq, const Tensor& wk,
                      int64_t q_slots) {
  const int64_t Dh = wq.numel(), rows = rows_of(x, Dh);
  MT_CHECK(wk.numel() == Dh && q_slots > 0 && rows % (q_slots + 2) == 0, op, ": x ",
           x.shape().str(), " is not [groups, ", q_slots + 2, ", ", Dh, "] rows");
  return rows / (q_slots + 2) * (q_slots + 1);
}
}  // namespace

void qk_rmsnorm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk, float eps,
                        int64_t q_slots, Tensor& y, Tensor& rstd) {
  const char* op = "qk_rmsnorm_forward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&wq, "wq"}, {&wk, "wk"}, {&y, "y"}, {&rstd, "rstd"}});
  const int64_t stats = qk_norm_stats(op, x, wq, wk, q_slots);
  MT_CHECK(y.numel() == x.numel() && rstd.numel() == stats, op, ": shape mismatch");
  device_call(dev, op)->qk_rmsnorm_forward(x, wq, wk, eps, q_slots, y, rstd);
}

void qk_rmsnorm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& rstd,
                         const Tensor& dy, int64_t q_slots, Tensor& dx, Tensor& dwq, Tensor& dwk) {
  const char* op = "qk_rmsnorm_backward";
  const Device dev = device_of(op, {{&x, "x"},
                                    {&wq, "wq"},
                                    {&wk, "wk"},
                                    {&rstd, "rstd"},
                                    {&dy, "dy"},
                                    {&dx, "dx"},
                                    {&dwq, "dwq"},
                                    {&dwk, "dwk"}});
  const int64_t stats = qk_norm_stats(op, x, wq, wk, q_slots);
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && rstd.numel() == stats &&
               dwq.numel() == wq.numel() && dwk.numel() == wk.numel(),
           op, ": shape mismatch");
  device_call(dev, op)->qk_rmsnorm_backward(x, wq, wk, rstd, dy, q_slots, dx, dwq, dwk);
}

namespace {
// Shapes of a whole-projection q/k norm's tensors.
void check_qk_projection(const char* op, const Tensor& x, const Tensor& wq, const Tensor& wk,
                         const kernels::QkProjection& p,
                         std::initializer_list<const Tensor*> stats) {
  MT_CHECK(p.tokens >= 0 && p.groups > 0 && p.q_slots > 0 && p.head_dim > 0 &&
               x.numel() == p.tokens * p.row() && wq.numel() == p.local_q() &&
               wk.numel() == p.local_k(),
           op, ": x ", x.shape().str(), ", wq ", wq.shape().str(), ", wk ", wk.shape().str(),
           " are not ", p.tokens, " tokens of ", p.groups, " groups x ", p.q_slots + 2, " x ",
           p.head_dim);
  for (const Tensor* t : stats)
    MT_CHECK(t->numel() == 2 * p.tokens, op, ": statistics ", t->shape().str(), " are not [",
             p.tokens, ", 2]");
}
}  // namespace

void qk_projection_sums(const Tensor& x, const Tensor* dy, const Tensor& wq, const Tensor& wk,
                        const kernels::QkProjection& p, Tensor& sums) {
  const char* op = "qk_projection_sums";
  const Device dev =
      device_of(op, {{&x, "x"}, {dy, "dy"}, {&wq, "wq"}, {&wk, "wk"}, {&sums, "sums"}});
  check_qk_projection(op, x, wq, wk, p, {&sums});
  MT_CHECK(dy == nullptr || dy->numel() == x.numel(), op, ": dy ", dy->shape().str(),
           " is not x's ", x.shape().str());
  device_call(dev, op)->qk_projection_sums(x, dy, wq, wk, p, sums);
}

void qk_projection_norm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                const Tensor& sums, const kernels::QkProjection& p, Tensor& y,
                                Tensor& rstd) {
  const char* op = "qk_projection_norm_forward";
  const Device dev = device_of(
      op, {{&x, "x"}, {&wq, "wq"}, {&wk, "wk"}, {&sums, "sums"}, {&y, "y"}, {&rstd, "rstd"}});
  check_qk_projection(op, x, wq, wk, p, {&sums, &rstd});
  MT_CHECK(y.numel() == x.numel(), op, ": y ", y.shape().str(), " is not x's ", x.shape().str());
  device_call(dev, op)->qk_projection_norm_forward(x, wq, wk, sums, p, y, rstd);
}

void qk_projection_norm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                 const Tensor& rstd, const Tensor& dots, const Tensor& dy,
                                 const kernels::QkProjection& p, Tensor& dx, Tensor& dwq,
                                 Tensor& dwk) {
  const char* op = "qk_projection_norm_backward";
  const Device dev = device_of(op, {{&x, "x"},
                                    {&wq, "wq"},
                                    {&wk, "wk"},
                                    {&rstd, "rstd"},
                                    {&dots, "dots"},
                                    {&dy, "dy"},
                                    {&dx, "dx"},
                                    {&dwq, "dwq"},
                                    {&dwk, "dwk"}});
  check_qk_projection(op, x, wq, wk, p, {&rstd, &dots});
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && dwq.numel() == wq.numel() &&
               dwk.numel() == wk.numel(),
           op, ": shape mismatch");
  device_call(dev, op)->qk_projection_norm_backward(x, wq, wk, rstd, dots, dy, p, dx, dwq, dwk);
}

void gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind) {
  const char* op = "gelu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "gelu_forward: shape mismatch");
  device_call(dev, op)->gelu_forward(x, y, kind);
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind) {
  const char* op = "gelu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel(), "gelu_backward: shape mismatch");
  device_call(dev, op)->gelu_backward(x, dy, dx, kind);
}

void tanh_forward(const Tensor& x, Tensor& y) {
  const char* op = "tanh_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "tanh_forward: shape mismatch");
  device_call(dev, op)->tanh_forward(x, y);
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const char* op = "tanh_backward";
  const Device dev = device_of(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == y.numel() && dx.numel() == y.numel(), "tanh_backward: shape mismatch");
  device_call(dev, op)->tanh_backward(y, dy, dx);
}

void glu_forward(const Tensor& x, Tensor& y, math::Glu gate) {
  const char* op = "glu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  rows_of(y, last_dim(y));
  MT_CHECK(x.numel() == 2 * y.numel(), "glu_forward: x must be [N, 2F] for y ", y.shape().str());
  device_call(dev, op)->glu_forward(x, y, gate);
}

void glu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Glu gate) {
  const char* op = "glu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  rows_of(dy, last_dim(dy));
  MT_CHECK(x.numel() == 2 * dy.numel() && dx.numel() == x.numel(), "glu_backward: shapes");
  device_call(dev, op)->glu_backward(x, dy, dx, gate);
}

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding_forward";
  const Device dev = device_of(op, {{&ids, "ids"}, {&table, "table"}, {&out, "out"}});
  require_i32(op, ids, "ids");
  MT_CHECK(table.ndim() == 2, "embedding_forward: table must be 2-D, got ", table.shape().str());
  const int64_t d = table.dim(1);
  MT_CHECK(out.numel() == ids.numel() * d, "embedding_forward: out ", out.shape().str());
  device_call(dev, op)->embedding_forward(ids, table, vocab_start, out);
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
  device_call(dev, op)->embedding_backward(ids, dout, vocab_start, dtable);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device dev = device_of(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  MT_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shape mismatch ",
           a.shape().str(), " + ", b.shape().str());
  device_call(dev, op)->add(a, b, out);
}

void add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "add_bias";
  const Device dev = device_of(op, {{&y, "y"}, {&bias, "bias"}});
  rows_of(y, bias.numel());  // y is whole rows of the bias
  device_call(dev, op)->add_bias(y, bias);
}

void add_inplace(Tensor& acc, const Tensor& x) {
  const char* op = "add_inplace";
  const Device dev = device_of(op, {{&acc, "acc"}, {&x, "x"}});
  MT_CHECK(acc.numel() == x.numel(), "add_inplace: shape mismatch ", acc.shape().str(),
           " += ", x.shape().str());
  device_call(dev, op)->add_inplace(acc, x);
}

void scale_inplace(Tensor& x, float s) {
  const char* op = "scale_inplace";
  const Device dev = device_of(op, {{&x, "x"}});
  device_call(dev, op)->scale_inplace(x, s);
}

void fill(Tensor& x, float v) {
  const char* op = "fill";
  const Device dev = device_of(op, {{&x, "x"}});
  device_call(dev, op)->fill(x, v);
}

void cast(const Tensor& src, Tensor& dst) {
  const char* op = "cast";
  const Device dev = device_of(op, {{&src, "src"}, {&dst, "dst"}});
  MT_CHECK(src.numel() == dst.numel(), "cast: ", src.shape().str(), " into ", dst.shape().str());
  device_call(dev, op)->cast(src, dst);
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p) {
  const char* op = "adamw_step";
  const Device dev = device_of(op, {{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}});
  MT_CHECK(
      grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
      "adamw_step: state sizes differ from param ", param.shape().str());
  device_call(dev, op)->adamw_step(param, grad, m, v, p);
}

int64_t count_outside(const Tensor& x, float limit) {
  const char* op = "count_outside";
  const Device dev = device_of(op, {{&x, "x"}});
  return device_call(dev, op)->count_outside(x, limit);
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  const Device dev = device_of(op, {{&x, "x"}});
  return device_call(dev, op)->sum_squares(x);
}

double sum_squares_of(const std::vector<Tensor>& xs) {
  const char* op = "sum_squares_of";
  if (xs.empty()) return 0.0;
  for (const Tensor& x : xs) {
    MT_CHECK(x.device() == xs.front().device() && x.dtype() == xs.front().dtype(),
             "sum_squares_of: tensors on ", device_name(x.device()), " (", dtype_name(x.dtype()),
             ") and ", device_name(xs.front().device()), " (", dtype_name(xs.front().dtype()),
             "); give one device and dtype");
    const FloatArgs fa("sum_squares_of", {{&x, "xs[i]"}});
  }
  const Device dev = device_of(op, {{&xs.front(), "xs"}});
  return device_call(dev, op)->sum_squares_of(xs);
}

}  // namespace megatron::ops
