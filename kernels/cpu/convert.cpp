#include "kernels/cpu/convert.h"

#include <cstring>

#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

void bf16_to_f32(const bf16_t* in, float* out, int64_t n) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(in);
  uint32_t* dst = reinterpret_cast<uint32_t*>(out);
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) dst[i] = uint32_t{src[i]} << 16;
}

void f32_to_bf16(const float* in, bf16_t* out, int64_t n) {
  const uint32_t* src = reinterpret_cast<const uint32_t*>(in);
  uint16_t* dst = reinterpret_cast<uint16_t*>(out);
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t u = src[i];
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (u >> 16) | 0x40u;
    dst[i] = static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

}  // namespace megatron::kernels::cpu
