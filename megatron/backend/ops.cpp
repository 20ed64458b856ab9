#include "megatron/backend/ops.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#ifdef MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/ops_cuda.h"
#endif

// Every op: (1) the device of its tensors (all on one device, else an error naming each
// tensor's device), (2) the shape checks shared by all devices, (3) on CUDA, the CUDA backend's
// version (backend/cuda/ops_cuda.h: dtype checks and the kernels/cuda launch on the current
// stream), (4) on the CPU, the fp32 checks and the kernels/cpu call.
#ifdef MEGATRON_WITH_CUDA
#define MT_RUN_ON_CUDA(device, call) \
  if ((device) == Device::CUDA) return cuda_backend::call
#else
#define MT_RUN_ON_CUDA(device, call) (void)(device)
#endif

namespace megatron::ops {
namespace cpu = kernels::cpu;

namespace {

struct Arg {
  const Tensor* t;  // null: an optional tensor that was not given
  const char* name;
};

// The device of all of an op's tensors. A CUDA tensor without the CUDA backend, or tensors on
// different devices, are errors rather than a silent copy.
Device device_of(const char* op, std::initializer_list<Arg> args) {
  const Tensor* first = nullptr;
  bool mixed = false;
  for (const Arg& a : args) {
    if (a.t == nullptr) continue;
    if (first == nullptr) first = a.t;
    mixed = mixed || a.t->device() != first->device();
  }
  if (mixed) {
    std::string where;
    for (const Arg& a : args)
      if (a.t != nullptr)
        where += concat(where.empty() ? "" : ", ", a.name, " on ", device_name(a.t->device()));
    MT_CHECK(false, op, ": tensors on different devices (", where,
             "); move them to one device with Tensor::to(Device)");
  }
  const Device device = first != nullptr ? first->device() : Device::CPU;
#ifndef MEGATRON_WITH_CUDA
  MT_CHECK(device == Device::CPU, op, ": the tensors are on ", device_name(device),
           " but this build has no CUDA backend (configure with -DMEGATRON_CUDA=ON)");
#endif
  return device;
}

// The CPU kernels are fp32 (low-precision storage is converted by the caller).
void require_f32(const char* op, std::initializer_list<Arg> args) {
  for (const Arg& a : args)
    if (a.t != nullptr)
      MT_CHECK(a.t->dtype() == DType::F32, op, ": ", a.name, " must be fp32 on the cpu, got ",
               dtype_name(a.t->dtype()));
}

void require_i32(const char* op, const Tensor& t, const char* name) {
  MT_CHECK(t.dtype() == DType::I32, op, ": ", name, " must be int32, got ", dtype_name(t.dtype()));
}

int64_t rows_of(const Tensor& t, int64_t row_len) {
  MT_CHECK(row_len > 0 && t.numel() % row_len == 0, "tensor ", t.shape().str(),
           " is not a whole number of rows of ", row_len);
  return t.numel() / row_len;
}

int64_t last_dim(const Tensor& t) { return t.dim(t.ndim() - 1); }

// Host conversions of the three float storage types (kernels/common/numeric.h rounding).
template <typename T>
float load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, float>) return p[i];
  if constexpr (std::is_same_v<T, bf16_t>) return math::bf16_bits_to_float(p[i].bits);
  if constexpr (std::is_same_v<T, fp16_t>) return math::fp16_bits_to_float(p[i].bits);
}

template <typename T>
void store(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, float>) p[i] = v;
  if constexpr (std::is_same_v<T, bf16_t>) p[i].bits = math::float_to_bf16_bits(v);
  if constexpr (std::is_same_v<T, fp16_t>) p[i].bits = math::float_to_fp16_bits(v);
}

// fn.template operator()<T>() for T in {float, bf16_t, fp16_t} (checked by the caller).
template <typename Fn>
void dispatch_float_storage(DType t, Fn&& fn) {
  if (t == DType::F32) fn.template operator()<float>();
  if (t == DType::BF16) fn.template operator()<bf16_t>();
  if (t == DType::F16) fn.template operator()<fp16_t>();
}

void check_attention_shape(const cpu::AttentionShape& s, const Tensor& qkv, const char* op) {
  MT_CHECK(s.G > 0 && s.H % s.G == 0, op, ": heads ", s.H, " not divisible by groups ", s.G);
  MT_CHECK(qkv.numel() == s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, op, ": qkv ", qkv.shape().str(),
           " does not match S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G, " Dh=", s.Dh);
}

}  // namespace

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) {
  const char* op = "linear_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y"}});
  MT_CHECK(w.ndim() == 2, "linear_forward: weight must be 2-D, got ", w.shape().str());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(y.numel() == n * out, "linear_forward: output ", y.shape().str(), " != [", n, ", ", out,
           "]");
  if (b) MT_CHECK(b->numel() == out, "linear_forward: bias ", b->shape().str(), " != [", out, "]");
  MT_RUN_ON_CUDA(dev, linear_forward(x, w, b, y));
  require_f32(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y"}});
  cpu::gemm(false, true, n, out, in, 1.0f, x.data<float>(), in, w.data<float>(), in, 0.0f,
            y.data<float>(), out, b ? b->data<float>() : nullptr);
}

void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db) {
  const char* op = "linear_backward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {dx, "dx"}, {&dw, "dw"}, {db, "db"}});
  MT_CHECK(w.ndim() == 2, "linear_backward: weight must be 2-D, got ", w.shape().str());
  const int64_t out = w.dim(0), in = w.dim(1);
  const int64_t n = rows_of(x, in);
  MT_CHECK(dy.numel() == n * out && dw.numel() == out * in, "linear_backward: shape mismatch");
  if (dx) MT_CHECK(dx->numel() == n * in, "linear_backward: dx ", dx->shape().str());
  if (db) MT_CHECK(db->numel() == out, "linear_backward: db ", db->shape().str());
  MT_RUN_ON_CUDA(dev, linear_backward(x, w, dy, dx, dw, db));
  require_f32(op, {{&x, "x"}, {&w, "w"}, {&dy, "dy"}, {dx, "dx"}, {&dw, "dw"}, {db, "db"}});
  if (dx) {
    cpu::gemm(false, false, n, in, out, 1.0f, dy.data<float>(), out, w.data<float>(), in, 0.0f,
              dx->data<float>(), in);
  }
  cpu::gemm(true, false, out, in, n, 1.0f, dy.data<float>(), out, x.data<float>(), in, 1.0f,
            dw.data<float>(), in);
  if (db) cpu::bias_grad(dy.data<float>(), n, out, db->data<float>());
}

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  const Device dev =
      device_of(op, {{&x, "x"}, {&w, "w"}, {&b, "b"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(b.numel() == d && y.numel() == x.numel() && mean.numel() == n && rstd.numel() == n,
           "layernorm_forward: shape mismatch for x ", x.shape().str());
  MT_RUN_ON_CUDA(dev, layernorm_forward(x, w, b, eps, y, mean, rstd));
  require_f32(op, {{&x, "x"}, {&w, "w"}, {&b, "b"}, {&y, "y"}, {&mean, "mean"}, {&rstd, "rstd"}});
  cpu::layernorm_forward(x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(),
                         mean.data<float>(), rstd.data<float>(), n, d, eps);
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
  MT_RUN_ON_CUDA(dev, layernorm_backward(x, w, mean, rstd, dy, dx, dw, db));
  require_f32(op, {{&x, "x"},
                   {&w, "w"},
                   {&mean, "mean"},
                   {&rstd, "rstd"},
                   {&dy, "dy"},
                   {&dx, "dx"},
                   {&dw, "dw"},
                   {&db, "db"}});
  cpu::layernorm_backward(x.data<float>(), w.data<float>(), mean.data<float>(), rstd.data<float>(),
                          dy.data<float>(), dx.data<float>(), dw.data<float>(), db.data<float>(), n,
                          d);
}

void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {&rstd, "rstd"}});
  const int64_t d = w.numel(), n = rows_of(x, d);
  MT_CHECK(y.numel() == x.numel() && rstd.numel() == n, "rmsnorm_forward: shape mismatch");
  MT_RUN_ON_CUDA(dev, rmsnorm_forward(x, w, eps, y, rstd));
  require_f32(op, {{&x, "x"}, {&w, "w"}, {&y, "y"}, {&rstd, "rstd"}});
  cpu::rmsnorm_forward(x.data<float>(), w.data<float>(), y.data<float>(), rstd.data<float>(), n, d,
                       eps);
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
  MT_RUN_ON_CUDA(dev, rmsnorm_backward(x, w, rstd, dy, dx, dw));
  require_f32(op, {{&x, "x"}, {&w, "w"}, {&rstd, "rstd"}, {&dy, "dy"}, {&dx, "dx"}, {&dw, "dw"}});
  cpu::rmsnorm_backward(x.data<float>(), w.data<float>(), rstd.data<float>(), dy.data<float>(),
                        dx.data<float>(), dw.data<float>(), n, d);
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const char* op = "gelu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "gelu_forward: shape mismatch");
  MT_RUN_ON_CUDA(dev, gelu_forward(x, y));
  require_f32(op, {{&x, "x"}, {&y, "y"}});
  cpu::gelu_forward(x.data<float>(), y.data<float>(), x.numel());
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const char* op = "gelu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel(), "gelu_backward: shape mismatch");
  MT_RUN_ON_CUDA(dev, gelu_backward(x, dy, dx));
  require_f32(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  cpu::gelu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), x.numel());
}

void tanh_forward(const Tensor& x, Tensor& y) {
  const char* op = "tanh_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "tanh_forward: shape mismatch");
  MT_RUN_ON_CUDA(dev, tanh_forward(x, y));
  require_f32(op, {{&x, "x"}, {&y, "y"}});
  cpu::tanh_forward(x.data<float>(), y.data<float>(), x.numel());
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const char* op = "tanh_backward";
  const Device dev = device_of(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == y.numel() && dx.numel() == y.numel(), "tanh_backward: shape mismatch");
  MT_RUN_ON_CUDA(dev, tanh_backward(y, dy, dx));
  require_f32(op, {{&y, "y"}, {&dy, "dy"}, {&dx, "dx"}});
  cpu::tanh_backward(y.data<float>(), dy.data<float>(), dx.data<float>(), y.numel());
}

void swiglu_forward(const Tensor& x, Tensor& y) {
  const char* op = "swiglu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  const int64_t f = last_dim(y), n = rows_of(y, f);
  MT_CHECK(x.numel() == 2 * y.numel(), "swiglu_forward: x must be [N, 2F] for y ", y.shape().str());
  MT_RUN_ON_CUDA(dev, swiglu_forward(x, y));
  require_f32(op, {{&x, "x"}, {&y, "y"}});
  cpu::swiglu_forward(x.data<float>(), y.data<float>(), n, f);
}

void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const char* op = "swiglu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  const int64_t f = last_dim(dy), n = rows_of(dy, f);
  MT_CHECK(x.numel() == 2 * dy.numel() && dx.numel() == x.numel(), "swiglu_backward: shapes");
  MT_RUN_ON_CUDA(dev, swiglu_backward(x, dy, dx));
  require_f32(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  cpu::swiglu_backward(x.data<float>(), dy.data<float>(), dx.data<float>(), n, f);
}

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const char* op = "embedding_forward";
  const Device dev = device_of(op, {{&ids, "ids"}, {&table, "table"}, {&out, "out"}});
  require_i32(op, ids, "ids");
  MT_CHECK(table.ndim() == 2, "embedding_forward: table must be 2-D, got ", table.shape().str());
  const int64_t d = table.dim(1);
  MT_CHECK(out.numel() == ids.numel() * d, "embedding_forward: out ", out.shape().str());
  MT_RUN_ON_CUDA(dev, embedding_forward(ids, table, vocab_start, out));
  require_f32(op, {{&table, "table"}, {&out, "out"}});
  cpu::embedding_forward(ids.data<int32_t>(), ids.numel(), table.data<float>(), vocab_start,
                         table.dim(0), d, out.data<float>());
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
  MT_RUN_ON_CUDA(dev, embedding_backward(ids, dout, vocab_start, dtable));
  require_f32(op, {{&dout, "dout"}, {&dtable, "dtable"}});
  cpu::embedding_backward(ids.data<int32_t>(), ids.numel(), dout.data<float>(), vocab_start,
                          dtable.dim(0), d, dtable.data<float>());
}

void attention_forward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&probs, "probs"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && probs.numel() == s.B * s.H * s.S * s.S,
           "attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  MT_RUN_ON_CUDA(dev, attention_forward(s, opt, qkv, out, probs));
  require_f32(op, {{&qkv, "qkv"}, {&out, "out"}, {&probs, "probs"}});
  cpu::attention_forward(s, opt, qkv.data<float>(), out.data<float>(), probs.data<float>());
}

void attention_backward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv) {
  const char* op = "attention_backward";
  const Device dev =
      device_of(op, {{&qkv, "qkv"}, {&probs, "probs"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               probs.numel() == s.B * s.H * s.S * s.S,
           "attention_backward: buffer sizes");
  MT_RUN_ON_CUDA(dev, attention_backward(s, opt, qkv, probs, dout, dqkv));
  require_f32(op, {{&qkv, "qkv"}, {&probs, "probs"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  cpu::attention_backward(s, opt, qkv.data<float>(), probs.data<float>(), dout.data<float>(),
                          dqkv.data<float>());
}

void flash_attention_forward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                             const Tensor& qkv, Tensor& out, Tensor& lse) {
  const char* op = "flash_attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && lse.numel() == s.B * s.H * s.S,
           "flash_attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  MT_RUN_ON_CUDA(dev, flash_attention_forward(s, opt, qkv, out, lse));
  require_f32(op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}});
  cpu::flash_attention_forward(s, opt, qkv.data<float>(), out.data<float>(), lse.data<float>());
}

void flash_attention_backward(const cpu::AttentionShape& s, const cpu::AttentionOptions& opt,
                              const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, Tensor& dqkv) {
  const char* op = "flash_attention_backward";
  const Device dev = device_of(
      op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               out.numel() == dout.numel() && lse.numel() == s.B * s.H * s.S,
           "flash_attention_backward: buffer sizes");
  MT_RUN_ON_CUDA(dev, flash_attention_backward(s, opt, qkv, out, lse, dout, dqkv));
  require_f32(op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  cpu::flash_attention_backward(s, opt, qkv.data<float>(), out.data<float>(), lse.data<float>(),
                                dout.data<float>(), dqkv.data<float>());
}

void rope_forward(const cpu::AttentionShape& s, Tensor& qkv, float theta, int64_t offset) {
  const char* op = "rope_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}});
  check_attention_shape(s, qkv, op);
  MT_RUN_ON_CUDA(dev, rope_forward(s, qkv, theta, offset));
  require_f32(op, {{&qkv, "qkv"}});
  cpu::rope_forward(s, qkv.data<float>(), theta, offset);
}

void rope_backward(const cpu::AttentionShape& s, Tensor& dqkv, float theta, int64_t offset) {
  const char* op = "rope_backward";
  const Device dev = device_of(op, {{&dqkv, "dqkv"}});
  check_attention_shape(s, dqkv, op);
  MT_RUN_ON_CUDA(dev, rope_backward(s, dqkv, theta, offset));
  require_f32(op, {{&dqkv, "dqkv"}});
  cpu::rope_backward(s, dqkv.data<float>(), theta, offset);
}

void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  const char* op = "dropout_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "dropout_forward: shape mismatch");
  MT_RUN_ON_CUDA(dev, dropout_forward(x, y, p, seed, stream, index_offset));
  require_f32(op, {{&x, "x"}, {&y, "y"}});
  cpu::dropout_forward(x.data<float>(), y.data<float>(), x.numel(), p, seed, stream, index_offset);
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset) {
  const char* op = "dropout_backward";
  const Device dev = device_of(op, {{&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dx.numel() == dy.numel(), "dropout_backward: shape mismatch");
  MT_RUN_ON_CUDA(dev, dropout_backward(dy, dx, p, seed, stream, index_offset));
  require_f32(op, {{&dy, "dy"}, {&dx, "dx"}});
  cpu::dropout_backward(dy.data<float>(), dx.data<float>(), dy.numel(), p, seed, stream,
                        index_offset);
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, const cpu::VocabSlice& vs,
                           int32_t ignore_index, Tensor& loss, Tensor& lse) {
  const char* op = "cross_entropy_forward";
  const Device dev =
      device_of(op, {{&logits, "logits"}, {&targets, "targets"}, {&loss, "loss"}, {&lse, "lse"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && loss.numel() == n && lse.numel() == n,
           "cross_entropy_forward: logits ", logits.shape().str(), " vs ", n, " targets");
  MT_RUN_ON_CUDA(dev, cross_entropy_forward(logits, targets, vs, ignore_index, loss, lse));
  require_f32(op, {{&logits, "logits"}, {&loss, "loss"}, {&lse, "lse"}});
  cpu::cross_entropy_forward(logits.data<float>(), targets.data<int32_t>(), n, vs, ignore_index,
                             loss.data<float>(), lse.data<float>());
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const cpu::VocabSlice& vs,
                            int32_t ignore_index, const Tensor& lse, const Tensor& dloss,
                            Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const Device dev = device_of(op, {{&logits, "logits"},
                                    {&targets, "targets"},
                                    {&lse, "lse"},
                                    {&dloss, "dloss"},
                                    {&dlogits, "dlogits"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && dlogits.numel() == logits.numel() &&
               dloss.numel() == n && lse.numel() == n,
           "cross_entropy_backward: shape mismatch");
  MT_RUN_ON_CUDA(dev,
                 cross_entropy_backward(logits, targets, vs, ignore_index, lse, dloss, dlogits));
  require_f32(op, {{&logits, "logits"}, {&lse, "lse"}, {&dloss, "dloss"}, {&dlogits, "dlogits"}});
  cpu::cross_entropy_backward(logits.data<float>(), targets.data<int32_t>(), n, vs, ignore_index,
                              lse.data<float>(), dloss.data<float>(), dlogits.data<float>());
}

void cross_entropy_row_max(const Tensor& logits, const cpu::VocabSlice& vs, Tensor& row_max) {
  const char* op = "cross_entropy_row_max";
  const Device dev = device_of(op, {{&logits, "logits"}, {&row_max, "row_max"}});
  const int64_t n = rows_of(logits, vs.V_local);
  MT_CHECK(row_max.numel() == n, "cross_entropy_row_max: row_max ", row_max.shape().str(), " for ",
           n, " rows");
  MT_RUN_ON_CUDA(dev, cross_entropy_row_max(logits, vs, row_max));
  require_f32(op, {{&logits, "logits"}, {&row_max, "row_max"}});
  cpu::cross_entropy_row_max(logits.data<float>(), n, vs, row_max.data<float>());
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets, const cpu::VocabSlice& vs,
                           const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit) {
  const char* op = "cross_entropy_sum_exp";
  const Device dev = device_of(op, {{&logits, "logits"},
                                    {&targets, "targets"},
                                    {&row_max, "row_max"},
                                    {&sum_exp, "sum_exp"},
                                    {&target_logit, "target_logit"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && row_max.numel() == n && sum_exp.numel() == n &&
               target_logit.numel() == n,
           "cross_entropy_sum_exp: logits ", logits.shape().str(), " vs ", n, " targets");
  MT_RUN_ON_CUDA(dev, cross_entropy_sum_exp(logits, targets, vs, row_max, sum_exp, target_logit));
  require_f32(op, {{&logits, "logits"},
                   {&row_max, "row_max"},
                   {&sum_exp, "sum_exp"},
                   {&target_logit, "target_logit"}});
  cpu::cross_entropy_sum_exp(logits.data<float>(), targets.data<int32_t>(), n, vs,
                             row_max.data<float>(), sum_exp.data<float>(),
                             target_logit.data<float>());
}

void cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                        const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                        Tensor& lse) {
  const char* op = "cross_entropy_loss";
  const Device dev = device_of(op, {{&targets, "targets"},
                                    {&row_max, "row_max"},
                                    {&sum_exp, "sum_exp"},
                                    {&target_logit, "target_logit"},
                                    {&loss, "loss"},
                                    {&lse, "lse"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(row_max.numel() == n && sum_exp.numel() == n && target_logit.numel() == n &&
               loss.numel() == n && lse.numel() == n,
           "cross_entropy_loss: every statistic must have one value per target (", n, ")");
  MT_RUN_ON_CUDA(
      dev, cross_entropy_loss(targets, ignore_index, row_max, sum_exp, target_logit, loss, lse));
  require_f32(op, {{&row_max, "row_max"},
                   {&sum_exp, "sum_exp"},
                   {&target_logit, "target_logit"},
                   {&loss, "loss"},
                   {&lse, "lse"}});
  cpu::cross_entropy_loss(targets.data<int32_t>(), n, ignore_index, row_max.data<float>(),
                          sum_exp.data<float>(), target_logit.data<float>(), loss.data<float>());
  const float* mx = row_max.data<float>();
  const float* se = sum_exp.data<float>();
  float* out = lse.data<float>();
  for (int64_t i = 0; i < n; ++i) out[i] = mx[i] + std::log(se[i]);
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device dev = device_of(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  MT_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shape mismatch ",
           a.shape().str(), " + ", b.shape().str());
  MT_RUN_ON_CUDA(dev, add(a, b, out));
  require_f32(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  cpu::add(a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void add_bias(Tensor& y, const Tensor& bias) {
  const char* op = "add_bias";
  const Device dev = device_of(op, {{&y, "y"}, {&bias, "bias"}});
  const int64_t n = bias.numel(), rows = rows_of(y, n);
  MT_RUN_ON_CUDA(dev, add_bias(y, bias));
  require_f32(op, {{&y, "y"}, {&bias, "bias"}});
  for (int64_t r = 0; r < rows; ++r)
    cpu::add_inplace(y.data<float>() + r * n, bias.data<float>(), n);
}

void add_inplace(Tensor& acc, const Tensor& x) {
  const char* op = "add_inplace";
  const Device dev = device_of(op, {{&acc, "acc"}, {&x, "x"}});
  MT_CHECK(acc.numel() == x.numel(), "add_inplace: shape mismatch ", acc.shape().str(),
           " += ", x.shape().str());
  MT_RUN_ON_CUDA(dev, add_inplace(acc, x));
  require_f32(op, {{&acc, "acc"}, {&x, "x"}});
  cpu::add_inplace(acc.data<float>(), x.data<float>(), acc.numel());
}

void scale_inplace(Tensor& x, float s) {
  const char* op = "scale_inplace";
  const Device dev = device_of(op, {{&x, "x"}});
  MT_RUN_ON_CUDA(dev, scale_inplace(x, s));
  require_f32(op, {{&x, "x"}});
  cpu::scale_inplace(x.data<float>(), s, x.numel());
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
  MT_RUN_ON_CUDA(dev, adamw_step(param, grad, m, v, p));
  require_f32(op, {{&param, "param"}, {&grad, "grad"}, {&m, "m"}, {&v, "v"}});
  cpu::adamw_step(param.data<float>(), grad.data<float>(), m.data<float>(), v.data<float>(),
                  param.numel(), p);
}

int64_t count_outside(const Tensor& x, float limit) {
  const char* op = "count_outside";
  const Device dev = device_of(op, {{&x, "x"}});
  MT_RUN_ON_CUDA(dev, count_outside(x, limit));
  require_f32(op, {{&x, "x"}});
  return cpu::count_outside(x.data<float>(), x.numel(), limit);
}

double sum_squares(const Tensor& x) {
  const char* op = "sum_squares";
  const Device dev = device_of(op, {{&x, "x"}});
  MT_RUN_ON_CUDA(dev, sum_squares(x));
  require_f32(op, {{&x, "x"}});
  return cpu::sum_squares(x.data<float>(), x.numel());
}

}  // namespace megatron::ops
