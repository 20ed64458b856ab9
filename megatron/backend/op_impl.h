#pragma once
// What the CPU backend's files (cpu_ops*.cpp) share beyond the front end's checks
// (op_checks.h): the float-argument widening, host conversions of the float storage types and
// the dispatch onto the kernels templated on them. Not an interface: include only from those
// files.
#include <cmath>
#include <type_traits>

#include "kernels/cpu/attention_sinks.h"
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
#include "megatron/backend/float_args.h"
#include "megatron/backend/linear_cpu.h"
#include "megatron/backend/op_checks.h"

namespace megatron::ops::impl {
namespace cpu = kernels::cpu;

using detail::Access;
using detail::as_fp32;
using detail::Fp32OnCpu;
using detail::Role;
constexpr Access kWritten = Access::Write;   // overwritten: never widened on the CPU
constexpr Access kUpdated = Access::Update;  // read and written (accumulated, in place)

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

}  // namespace megatron::ops::impl
