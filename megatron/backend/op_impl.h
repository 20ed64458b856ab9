#pragma once
// What the ops' front end (ops*.cpp) and the CPU backend (cpu_ops*.cpp) share: the device check
// of an op's tensors, the float-argument widening of the CPU path and small shape helpers. Not
// an interface: include only from those files.
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
#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/rope.h"
#include "megatron/backend/device_backends.h"
#include "megatron/backend/float_args.h"
#include "megatron/backend/linear_cpu.h"
#include "megatron/backend/ops.h"

// Every op: (1) the device of its tensors (all on one device, else an error naming each
// tensor's device), (2) the shape checks shared by all devices, (3) that device's backend
// (backend::device_ops): on the CPU, CpuOps (cpu_ops.h: the dtype contract, then the kernels/cpu
// call), on CUDA, CudaOps (cuda/ops_cuda.h: dtype checks and the kernels/cuda launch on the
// current stream).

namespace megatron::ops::impl {
namespace cpu = kernels::cpu;

using backend::device_ops;
using detail::Access;
using detail::as_fp32;
using detail::FloatArgs;
using detail::Fp32OnCpu;
using detail::Role;
constexpr Access kWritten = Access::Write;   // overwritten: never widened on the CPU
constexpr Access kUpdated = Access::Update;  // read and written (accumulated, in place)

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

// Host conversions of the three float storage types (kernels/common/numeric.h rounding).
template <typename T>
inline float load(const T* p, int64_t i) {
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

// The CPU kernels templated on the storage type (elementwise, norms, embedding) take fp32 and
// bf16 tensors as stored and widen bf16 in registers: the same values as Fp32OnCpu's copies,
// without their memory traffic. Calls fn.template operator()<T>() for T = float or bf16_t and
// returns true; false for fp16 (the caller widens: the kernels have no vectorized fp16 loads).
template <typename Fn>
bool run_as_stored(DType t, Fn&& fn) {
  if (t == DType::F32)
    fn.template operator()<float>();
  else if (t == DType::BF16)
    fn.template operator()<bf16_t>();
  else
    return false;
  return true;
}

inline void check_attention_shape(const kernels::AttentionShape& s, const Tensor& qkv,
                                  const char* op) {
  MT_CHECK(s.G > 0 && s.H % s.G == 0, op, ": heads ", s.H, " not divisible by groups ", s.G);
  MT_CHECK(qkv.numel() == s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, op, ": qkv ", qkv.shape().str(),
           " does not match S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G, " Dh=", s.Dh);
}

}  // namespace megatron::ops::impl
