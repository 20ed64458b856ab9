#include "megatron/backend/ops.h"

#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"

namespace megatron::ops {
namespace cpu = kernels::cpu;

namespace {

// Every op runs on the device of its tensors; a CUDA tensor without CUDA kernels is an error
// rather than a silent host fallback.
void require_cpu(const Tensor& t, const char* op) {
  MT_CHECK(t.device() == Device::CPU, op, ": no ", device_name(t.device()),
           " kernel in this build (the CUDA backend is built with -DMEGATRON_CUDA=ON and lands "
           "op by op)");
}

void require_f32(const Tensor& t, const char* op, const char* what) {
  MT_CHECK(t.dtype() == DType::F32, op, ": ", what, " must be fp32, got ", dtype_name(t.dtype()));
  require_cpu(t, op);
}

int64_t rows_of(const Tensor& t, int64_t row_len) {
  MT_CHECK(row_len > 0 && t.numel() % row_len == 0, "tensor ", t.shape().str(),
           " is not a whole number of rows of ", row_len);
  return t.numel() / row_len;
}

int64_t last_dim(const Tensor& t) { return t.dim(t.ndim() - 1); }

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  require_f32(x, "linear_forward", "x");
  require_f32(w, "linear_forward", "w");
  require_f32(y, "linear_forward", "y");
  MT_CHECK(w.ndim() == 2, "linear_forward: weight must be 2-D, got ", w.shape().str());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(y.numel() == n * out, "linear_forward: output ", y.shape().str(), " != [", n, ", ", out,
           "]");
  if (b) MT_CHECK(b->numel() == out, "linear_forward: bias ", b->shape().str(), " != [", out, "]");
  cpu::gemm(false, true, n, out, in, 1.0f, x.data<float>(), in, w.data<float>(), in, 0.0f,
            y.data<float>(), out, b ? b->data<float>() : nullptr);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db) {
  require_f32(dy, "linear_backward", "dy");
  require_f32(dw, "linear_backward", "dw");
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(dy.numel() == n * out && dw.numel() == out * in, "linear_backward: shape mismatch");
  if (dx) {
    MT_CHECK(dx->numel() == n * in, "linear_backward: dx ", dx->shape().str());
    cpu::gemm(false, false, n, in, out, 1.0f, dy.data<float>(), out, w.data<float>(), in, 0.0f,
              dx->data<float>(), in);
  }
  cpu::gemm(true, false, out, in, n, 1.0f, dy.data<float>(), out, x.data<float>(), in, 1.0f,
            dw.data<float>(), in);
  if (db) cpu::bias_grad(dy.data<float>(), n, out, db->data<float>());
}

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd) {
  require_f32(x, "layernorm_forward", "x");
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(b.numel() == d && y.numel() == x.numel() && mean.numel() == n && rstd.numel() == n,
           "layernorm_forward: shape mismatch for x ", x.shape().str());
  cpu::layernorm_forward(x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(),
                         mean.data<float>(), rstd.data<float>(), n, d, eps);
}

void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db) {
  require_f32(dy, "layernorm_backward", "dy");
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == d && db.numel() == d,
           "layernorm_backward: shape mismatch");
  cpu::layernorm_backward(x.data<float>(), w.data<float>(), mean.data<float>(), rstd.data<float>(),
                          dy.data<float>(), dx.data<float>(), dw.data<float>(), db.data<float>(), n,
                          d);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  require_f32(x, "rmsnorm_forward", "x");
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(y.numel() == x.numel() && rstd.numel() == n, "rmsnorm_forward: shape mismatch");
  cpu::rmsnorm_forward(x.data<float>(), w.data<float>(), y.data<float>(), rstd.data<float>(), n, d,
                       eps);
}

void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw) {
  require_f32(dy, "rmsnorm_backward", "dy");
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel() && dw.numel() == d,
           "rmsnorm_backward: shape mismatch");
  cpu::rmsnorm_backward(x.data<float>(), w.data<float>(), rstd.data<float>(), dy.data<float>(),
                        dx.data<float>(), dw.data<float>(), n, d);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  require_f32(x, "gelu_forward", "x");
  MT_CHECK(y.numel() == x.numel(), "gelu_forward: shape mismatch");
  cpu::gelu_forward(x.data<float>(), y.data<float>(), x.numel());
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  require_f32(dy, "gelu_backward", "dy");
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel(), "gelu_backward: shape mismatch");
  cpu::gelu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel());
}

void swiglu_forward(const Tensor& x, Tensor& y) {
  require_f32(x, "swiglu_forward", "x");
  const int64_t f = last_dim(y), n = rows_of(y, f);
  MT_CHECK(x.numel() == 2 * y.numel(), "swiglu_forward: x must be [N, 2F] for y ", y.shape().str());
  cpu::swiglu_forward(x.data<float>(), y.data<float>(), n, f);
}

void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  require_f32(dy, "swiglu_backward", "dy");
  const int64_t f = last_dim(dy), n = rows_of(dy, f);
  MT_CHECK(x.numel() == 2 * dy.numel() && dx.numel() == x.numel(), "swiglu_backward: shapes");
  cpu::swiglu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), n, f);
}

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  require_f32(table, "embedding_forward", "table");
  MT_CHECK(ids.dtype() == DType::I32, "embedding_forward: ids must be int32");
  const int64_t d = table.dim(1);
  MT_CHECK(out.numel() == ids.numel() * d, "embedding_forward: out ", out.shape().str());
  cpu::embedding_forward(ids.data<int32_t>(), ids.numel(), table.data<float>(), vocab_start,
                         table.dim(0), d, out.data<float>());
}

void embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start,
                        Tensor& dtable) {
  require_f32(dtable, "embedding_backward", "dtable");
  const int64_t d = dtable.dim(1);
  MT_CHECK(dout.numel() == ids.numel() * d, "embedding_backward: dout ", dout.shape().str());
  cpu::embedding_backward(ids.data<int32_t>(), ids.numel(), dout.data<float>(), vocab_start,
                          dtable.dim(0), d, dtable.data<float>());
}

void attention_forward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs) {
  require_f32(qkv, "attention_forward", "qkv");
  MT_CHECK(s.G > 0 && s.H % s.G == 0, "attention: heads ", s.H, " not divisible by groups ", s.G);
  MT_CHECK(qkv.numel() == s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh &&
               out.numel() == s.S * s.B * s.H * s.Dh && probs.numel() == s.B * s.H * s.S * s.S,
           "attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  cpu::attention_forward(s, opt, qkv.data<float>(), out.data<float>(), probs.data<float>());
}

void attention_backward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv) {
  require_f32(dout, "attention_backward", "dout");
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh,
           "attention_backward: buffer sizes");
  cpu::attention_backward(s, opt, qkv.data<float>(), probs.data<float>(), dout.data<float>(),
                          dqkv.data<float>());
}

void rope_forward(const cpu::AttentionShape& s, Tensor& qkv, float theta, int64_t offset) {
  require_f32(qkv, "rope_forward", "qkv");
  cpu::rope_forward(s, qkv.data<float>(), theta, offset);
}

void rope_backward(const cpu::AttentionShape& s, Tensor& dqkv, float theta, int64_t offset) {
  require_f32(dqkv, "rope_backward", "dqkv");
  cpu::rope_backward(s, dqkv.data<float>(), theta, offset);
}

void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  require_f32(x, "dropout_forward", "x");
  MT_CHECK(y.numel() == x.numel(), "dropout_forward: shape mismatch");
  cpu::dropout_forward(x.data<float>(), y.data<float>(), x.numel(), p, seed, stream, index_offset);
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset) {
  require_f32(dy, "dropout_backward", "dy");
  MT_CHECK(dx.numel() == dy.numel(), "dropout_backward: shape mismatch");
  cpu::dropout_backward(dy.data<float>(), dx.data<float>(), dy.numel(), p, seed, stream,
                        index_offset);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const cpu::VocabSlice& vs,
                           int32_t ignore_index, Tensor& loss, Tensor& lse) {
  require_f32(logits, "cross_entropy_forward", "logits");
  MT_CHECK(targets.dtype() == DType::I32, "cross_entropy: targets must be int32");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && loss.numel() == n && lse.numel() == n,
           "cross_entropy_forward: logits ", logits.shape().str(), " vs ", n, " targets");
  cpu::cross_entropy_forward(logits.data<float>(), targets.data<int32_t>(), n, vs, ignore_index,
                             loss.data<float>(), lse.data<float>());
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const cpu::VocabSlice& vs,
                            int32_t ignore_index, const Tensor& lse, const Tensor& dloss,
                            Tensor& dlogits) {
  require_f32(logits, "cross_entropy_backward", "logits");
  const int64_t n = targets.numel();
  MT_CHECK(dlogits.numel() == logits.numel() && dloss.numel() == n && lse.numel() == n,
           "cross_entropy_backward: shape mismatch");
  cpu::cross_entropy_backward(logits.data<float>(), targets.data<int32_t>(), n, vs, ignore_index,
                              lse.data<float>(), dloss.data<float>(), dlogits.data<float>());
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  require_f32(a, "add", "a");
  MT_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shape mismatch ",
           a.shape().str(), " + ", b.shape().str());
  cpu::add(a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void add_bias(Tensor& y, const Tensor& bias) {
  require_f32(y, "add_bias", "y");
  const int64_t n = bias.numel(), rows = rows_of(y, n);
  for (int64_t r = 0; r < rows; ++r)
    cpu::add_inplace(y.data<float>() + r * n, bias.data<float>(), n);
}

void add_inplace(Tensor& acc, const Tensor& x) {
  require_f32(acc, "add_inplace", "acc");
  MT_CHECK(acc.numel() == x.numel(), "add_inplace: shape mismatch ", acc.shape().str(),
           " += ", x.shape().str());
  cpu::add_inplace(acc.data<float>(), x.data<float>(), acc.numel());
}

void scale_inplace(Tensor& x, float s) {
  require_f32(x, "scale_inplace", "x");
  cpu::scale_inplace(x.data<float>(), s, x.numel());
}

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p) {
  require_f32(param, "adamw_step", "param");
  MT_CHECK(
      grad.numel() == param.numel() && m.numel() == param.numel() && v.numel() == param.numel(),
      "adamw_step: state sizes differ from param ", param.shape().str());
  cpu::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                  param.numel(), p);
}

double sum_squares(const Tensor& x) {
  require_f32(x, "sum_squares", "x");
  return cpu::sum_squares(x.data<float>(), x.numel());
}

}  // namespace megatron::ops
