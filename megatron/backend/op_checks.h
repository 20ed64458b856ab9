#pragma once
// What the ops' front end (ops*.cpp) needs, and the CPU backend (op_impl.h) shares: the device
// check of an op's tensors and small shape helpers. Not an interface: include only from those
// files.
#include <initializer_list>
#include <string>

#include "megatron/backend/device_backends.h"
#include "megatron/backend/float_args.h"
#include "megatron/backend/op_profiler.h"
#include "megatron/backend/ops.h"

// Every op: (1) the device of its tensors (all on one device, else an error naming each
// tensor's device), (2) the shape checks shared by all devices, (3) that device's backend
// (backend::device_ops): on the CPU, CpuOps (cpu_ops.h: the dtype contract, then the kernels/cpu
// call), on CUDA, CudaOps (cuda/ops_cuda.h: dtype checks and the kernels/cuda launch on the
// current stream).

namespace megatron::ops::impl {

using backend::device_ops;
using detail::FloatArgs;

// The backend of `device` for one op call, timed while an op profiler is installed for that
// device: `device_call(dev, op)->linear_forward(...)` marks the op's start before the call and
// its end when the full expression ends (the temporary's destructor), exceptions included.
class DeviceCall {
 public:
  DeviceCall(Device device, const char* op)
      : ops_(&device_ops(device, op)), profiler_(backend::op_profiler(device)) {
    if (profiler_) profiler_->begin(op);
  }
  ~DeviceCall() {
    if (profiler_) profiler_->end();
  }
  DeviceCall(const DeviceCall&) = delete;
  DeviceCall& operator=(const DeviceCall&) = delete;
  const ops::DeviceOps* operator->() const { return ops_; }

 private:
  const ops::DeviceOps* ops_;
  backend::OpProfiler* profiler_;
};

inline DeviceCall device_call(Device device, const char* op) { return DeviceCall(device, op); }

struct Arg {
  const Tensor* t;  // null: an optional tensor that was not given
  const char* name;
};

// The device of all of an op's tensors. Tensors on different devices are an error rather than a
// silent copy (and a device without a backend in this build is one in device_ops).
inline Device device_of(const char* op, std::initializer_list<Arg> args) {
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
  return first != nullptr ? first->device() : Device::CPU;
}

inline void require_i32(const char* op, const Tensor& t, const char* name) {
  MT_CHECK(t.dtype() == DType::I32, op, ": ", name, " must be int32, got ", dtype_name(t.dtype()));
}

inline int64_t rows_of(const Tensor& t, int64_t row_len) {
  MT_CHECK(row_len > 0 && t.numel() % row_len == 0, "tensor ", t.shape().str(),
           " is not a whole number of rows of ", row_len);
  return t.numel() / row_len;
}

inline int64_t last_dim(const Tensor& t) { return t.dim(t.ndim() - 1); }

inline void check_attention_shape(const kernels::AttentionShape& s, const Tensor& qkv,
                                  const char* op) {
  MT_CHECK(s.G > 0 && s.H % s.G == 0, op, ": heads ", s.H, " not divisible by groups ", s.G);
  MT_CHECK(qkv.numel() == s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, op, ": qkv ", qkv.shape().str(),
           " does not match S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G, " Dh=", s.Dh);
}

}  // namespace megatron::ops::impl
