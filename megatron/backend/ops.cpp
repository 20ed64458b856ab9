#include "megatron/backend/ops.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "megatron/backend/float_args.h"
#include "megatron/backend/linear_cpu.h"
#ifdef MEGATRON_WITH_CUDA
#include "megatron/backend/cuda/ops_cuda.h"
#endif

// Every op: (1) the device of its tensors (all on one device, else an error naming each
// tensor's device), (2) the shape checks shared by all devices, (3) on CUDA, the CUDA backend's
// version (backend/cuda/ops_cuda.h: dtype checks and the kernels/cuda launch on the current
// stream), (4) on the CPU, the kernels/cpu call in fp32 (backend/float_args.h: the dtype
// contract is checked for every device, 16-bit tensors are widened for the CPU kernels).
#ifdef MEGATRON_WITH_CUDA
#define MT_RUN_ON_CUDA(device, call) \
  if ((device) == Device::CUDA) return cuda_backend::call
#else
#define MT_RUN_ON_CUDA(device, call) (void)(device)
#endif

namespace megatron::ops {
namespace cpu = kernels::cpu;

namespace {

using detail::Access;
using detail::FloatArgs;
using detail::Fp32OnCpu;
using detail::Role;
constexpr Access kWritten = Access::Write;   // overwritten: never widened on the CPU
constexpr Access kUpdated = Access::Update;  // read and written (accumulated, in place)

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

void check_attention_shape(const kernels::AttentionShape& s, const Tensor& qkv, const char* op) {
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
  const FloatArgs fa(op, {{&x, "x"}, {&w, "w"}, {b, "b"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, linear_forward(x, w, b, y));
  detail::linear_forward_cpu(fa, x, w, b, y, n, in, out);
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
  const FloatArgs fa(op, {{&x, "x"},
                          {&w, "w"},
                          {&dy, "dy"},
                          {dx, "dx", Role::T, kWritten},
                          {&dw, "dw", Role::TorF32, kUpdated},
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
  Fp32OnCpu f(fa);
  cpu::rmsnorm_backward(f.in(x), f.in(w), f.in(rstd), f.in(dy), f.out(dx), f.out(dw), n, d);
  f.finish();
}

void gelu_forward(const Tensor& x, Tensor& y) {
  const char* op = "gelu_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "gelu_forward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, gelu_forward(x, y));
  Fp32OnCpu f(fa);
  cpu::gelu_forward(f.in(x), f.out(y), x.numel());
  f.finish();
}

void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const char* op = "gelu_backward";
  const Device dev = device_of(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dy.numel() == x.numel() && dx.numel() == x.numel(), "gelu_backward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, gelu_backward(x, dy, dx));
  Fp32OnCpu f(fa);
  cpu::gelu_backward(f.in(x), f.in(dy), f.out(dx), x.numel());
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
  Fp32OnCpu f(fa);
  cpu::embedding_backward(ids.data<int32_t>(), ids.numel(), f.in(dout), vocab_start, dtable.dim(0),
                          d, f.out(dtable));
  f.finish();
}

void attention_forward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs) {
  const char* op = "attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&probs, "probs"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && probs.numel() == s.B * s.H * s.S * s.S,
           "attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  const FloatArgs fa(
      op,
      {{&qkv, "qkv"}, {&out, "out", Role::T, kWritten}, {&probs, "probs", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, attention_forward(s, opt, qkv, out, probs));
  Fp32OnCpu f(fa);
  cpu::attention_forward(s, opt, f.in(qkv), f.out(out), f.out(probs));
  f.finish();
}

void attention_backward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv) {
  const char* op = "attention_backward";
  const Device dev =
      device_of(op, {{&qkv, "qkv"}, {&probs, "probs"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               probs.numel() == s.B * s.H * s.S * s.S,
           "attention_backward: buffer sizes");
  const FloatArgs fa(op, {{&qkv, "qkv"},
                          {&probs, "probs", Role::F32},
                          {&dout, "dout"},
                          {&dqkv, "dqkv", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, attention_backward(s, opt, qkv, probs, dout, dqkv));
  Fp32OnCpu f(fa);
  cpu::attention_backward(s, opt, f.in(qkv), f.in(probs), f.in(dout), f.out(dqkv));
  f.finish();
}

void flash_attention_forward(const kernels::AttentionShape& s, const kernels::AttentionOptions& opt,
                             const Tensor& qkv, Tensor& out, Tensor& lse) {
  const char* op = "flash_attention_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(out.numel() == s.S * s.B * s.H * s.Dh && lse.numel() == s.B * s.H * s.S,
           "flash_attention_forward: buffer sizes do not match S=", s.S, " B=", s.B, " H=", s.H,
           " G=", s.G, " Dh=", s.Dh);
  const FloatArgs fa(
      op, {{&qkv, "qkv"}, {&out, "out", Role::T, kWritten}, {&lse, "lse", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, flash_attention_forward(s, opt, qkv, out, lse));
  Fp32OnCpu f(fa);
  cpu::flash_attention_forward(s, opt, f.in(qkv), f.out(out), f.out(lse));
  f.finish();
}

void flash_attention_backward(const kernels::AttentionShape& s,
                              const kernels::AttentionOptions& opt, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& dout,
                              Tensor& dqkv) {
  const char* op = "flash_attention_backward";
  const Device dev = device_of(
      op, {{&qkv, "qkv"}, {&out, "out"}, {&lse, "lse"}, {&dout, "dout"}, {&dqkv, "dqkv"}});
  check_attention_shape(s, qkv, op);
  MT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == s.S * s.B * s.H * s.Dh &&
               out.numel() == dout.numel() && lse.numel() == s.B * s.H * s.S,
           "flash_attention_backward: buffer sizes");
  const FloatArgs fa(op, {{&qkv, "qkv"},
                          {&out, "out"},
                          {&lse, "lse", Role::F32},
                          {&dout, "dout"},
                          {&dqkv, "dqkv", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, flash_attention_backward(s, opt, qkv, out, lse, dout, dqkv));
  Fp32OnCpu f(fa);
  cpu::flash_attention_backward(s, opt, f.in(qkv), f.in(out), f.in(lse), f.in(dout), f.out(dqkv));
  f.finish();
}

void rope_forward(const kernels::AttentionShape& s, Tensor& qkv, float theta, int64_t offset) {
  const char* op = "rope_forward";
  const Device dev = device_of(op, {{&qkv, "qkv"}});
  check_attention_shape(s, qkv, op);
  const FloatArgs fa(op, {{&qkv, "qkv", Role::T, kUpdated}});
  MT_RUN_ON_CUDA(dev, rope_forward(s, qkv, theta, offset));
  Fp32OnCpu f(fa);
  cpu::rope_forward(s, f.out(qkv), theta, offset);
  f.finish();
}

void rope_backward(const kernels::AttentionShape& s, Tensor& dqkv, float theta, int64_t offset) {
  const char* op = "rope_backward";
  const Device dev = device_of(op, {{&dqkv, "dqkv"}});
  check_attention_shape(s, dqkv, op);
  const FloatArgs fa(op, {{&dqkv, "dqkv", Role::T, kUpdated}});
  MT_RUN_ON_CUDA(dev, rope_backward(s, dqkv, theta, offset));
  Fp32OnCpu f(fa);
  cpu::rope_backward(s, f.out(dqkv), theta, offset);
  f.finish();
}

void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset) {
  const char* op = "dropout_forward";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(y.numel() == x.numel(), "dropout_forward: shape mismatch");
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, dropout_forward(x, y, p, seed, stream, index_offset));
  Fp32OnCpu f(fa);
  cpu::dropout_forward(f.in(x), f.out(y), x.numel(), p, seed, stream, index_offset);
  f.finish();
}

void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset) {
  const char* op = "dropout_backward";
  const Device dev = device_of(op, {{&dy, "dy"}, {&dx, "dx"}});
  MT_CHECK(dx.numel() == dy.numel(), "dropout_backward: shape mismatch");
  const FloatArgs fa(op, {{&dy, "dy"}, {&dx, "dx", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, dropout_backward(dy, dx, p, seed, stream, index_offset));
  Fp32OnCpu f(fa);
  cpu::dropout_backward(f.in(dy), f.out(dx), dy.numel(), p, seed, stream, index_offset);
  f.finish();
}

void dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                  uint64_t seed, uint64_t stream) {
  const char* op = "dropout_rows";
  const Device dev = device_of(op, {{&x, "x"}, {&y, "y"}});
  MT_CHECK(rows.S >= 0 && rows.B > 0 && rows.D > 0 && x.numel() == rows.S * rows.B * rows.D &&
               y.numel() == x.numel(),
           "dropout_rows: tensors ", x.shape().str(), " / ", y.shape().str(), " are not [", rows.S,
           ", ", rows.B, ", ", rows.D, "]");
  MT_CHECK(
      rows.batch_offset >= 0 && rows.seq_offset >= 0 && rows.seq_offset + rows.S <= rows.seq_total,
      "dropout_rows: rows [", rows.seq_offset, ", ", rows.seq_offset + rows.S,
      ") outside a sequence of ", rows.seq_total);
  const FloatArgs fa(op, {{&x, "x"}, {&y, "y", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, dropout_rows(x, y, rows, p, seed, stream));
  Fp32OnCpu f(fa);
  cpu::dropout_rows(f.in(x), f.out(y), rows, p, seed, stream);
  f.finish();
}

void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, int32_t ignore_index, Tensor& loss,
                           Tensor& lse) {
  const char* op = "cross_entropy_forward";
  const Device dev =
      device_of(op, {{&logits, "logits"}, {&targets, "targets"}, {&loss, "loss"}, {&lse, "lse"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && loss.numel() == n && lse.numel() == n,
           "cross_entropy_forward: logits ", logits.shape().str(), " vs ", n, " targets");
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&loss, "loss", Role::F32, kWritten},
                          {&lse, "lse", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, cross_entropy_forward(logits, targets, vs, ignore_index, loss, lse));
  if (logits.dtype() == DType::BF16) {  // the largest activation: read as stored, never widened
    cpu::cross_entropy_forward(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs, ignore_index,
                               loss.data<float>(), lse.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_forward(f.in(logits), targets.data<int32_t>(), n, vs, ignore_index,
                             f.out(loss), f.out(lse));
  f.finish();
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                            const kernels::VocabSlice& vs, int32_t ignore_index, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
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
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&lse, "lse", Role::F32},
                          {&dloss, "dloss", Role::F32},
                          {&dlogits, "dlogits", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev,
                 cross_entropy_backward(logits, targets, vs, ignore_index, lse, dloss, dlogits));
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_backward(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs, ignore_index,
                                lse.data<float>(), dloss.data<float>(), dlogits.data<bf16_t>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_backward(f.in(logits), targets.data<int32_t>(), n, vs, ignore_index, f.in(lse),
                              f.in(dloss), f.out(dlogits));
  f.finish();
}

void cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs, Tensor& row_max) {
  const char* op = "cross_entropy_row_max";
  const Device dev = device_of(op, {{&logits, "logits"}, {&row_max, "row_max"}});
  const int64_t n = rows_of(logits, vs.V_local);
  MT_CHECK(row_max.numel() == n, "cross_entropy_row_max: row_max ", row_max.shape().str(), " for ",
           n, " rows");
  const FloatArgs fa(op, {{&logits, "logits"}, {&row_max, "row_max", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, cross_entropy_row_max(logits, vs, row_max));
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_row_max(logits.data<bf16_t>(), n, vs, row_max.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_row_max(f.in(logits), n, vs, f.out(row_max));
  f.finish();
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, const Tensor& row_max, Tensor& sum_exp,
                           Tensor& target_logit) {
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
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&row_max, "row_max", Role::F32},
                          {&sum_exp, "sum_exp", Role::F32, kWritten},
                          {&target_logit, "target_logit", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(dev, cross_entropy_sum_exp(logits, targets, vs, row_max, sum_exp, target_logit));
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_sum_exp(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs,
                               row_max.data<float>(), sum_exp.data<float>(),
                               target_logit.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_sum_exp(f.in(logits), targets.data<int32_t>(), n, vs, f.in(row_max),
                             f.out(sum_exp), f.out(target_logit));
  f.finish();
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
  const FloatArgs fa(op, {{&row_max, "row_max", Role::F32},
                          {&sum_exp, "sum_exp", Role::F32},
                          {&target_logit, "target_logit", Role::F32},
                          {&loss, "loss", Role::F32, kWritten},
                          {&lse, "lse", Role::F32, kWritten}});
  MT_RUN_ON_CUDA(
      dev, cross_entropy_loss(targets, ignore_index, row_max, sum_exp, target_logit, loss, lse));
  Fp32OnCpu f(fa);
  cpu::cross_entropy_loss(targets.data<int32_t>(), n, ignore_index, f.in(row_max), f.in(sum_exp),
                          f.in(target_logit), f.out(loss));
  const float* mx = f.in(row_max);
  const float* se = f.in(sum_exp);
  float* out = f.out(lse);
  for (int64_t i = 0; i < n; ++i) out[i] = mx[i] + std::log(se[i]);
  f.finish();
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add";
  const Device dev = device_of(op, {{&a, "a"}, {&b, "b"}, {&out, "out"}});
  MT_CHECK(a.numel() == b.numel() && out.numel() == a.numel(), "add: shape mismatch ",
           a.shape().str(), " + ", b.shape().str());
  const FloatArgs fa(op, {{&a, "a"}, {&b, "b"}, {&out, "out", Role::T, kWritten}});
  MT_RUN_ON_CUDA(dev, add(a, b, out));
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
  Fp32OnCpu f(fa);
  cpu::add_inplace(f.out(acc), f.in(x), acc.numel());
  f.finish();
}

void scale_inplace(Tensor& x, float s) {
  const char* op = "scale_inplace";
  const Device dev = device_of(op, {{&x, "x"}});
  const FloatArgs fa(op, {{&x, "x", Role::T, kUpdated}});
  MT_RUN_ON_CUDA(dev, scale_inplace(x, s));
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
