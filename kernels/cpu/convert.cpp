#include "kernels/cpu/convert.h"

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"

namespace megatron::kernels::cpu {

// The element conversions are kernels/common/numeric.h's; g++ vectorizes both loops.
void bf16_to_f32(const bf16_t* in, float* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = math::bf16_bits_to_float(in[i].bits);
}

void f32_to_bf16(const float* in, bf16_t* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i].bits = math::float_to_bf16_bits(in[i]);
}

}  // namespace megatron::kernels::cpu
