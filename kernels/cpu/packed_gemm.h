#pragma once
// Our own fp32 GEMM for AVX2 + FMA CPUs, in the BLIS layout: op(B) packed in panels of 16
// columns, op(A) in panels of 6 rows, a 6x16 register-tile micro-kernel (12 accumulators), the
// K dimension in cache-sized blocks. Operands may be fp32 or bf16: bf16 is widened while it is
// packed, so a bf16 layer on a CPU without bf16 instructions needs no fp32 copy of its inputs.
// Same contract as kernels::cpu::gemm (gemm.h): row-major, C[M,N] = alpha * op(A) @ op(B) +
// beta * C (+ bias[N] per row); beta == 0 never reads C. Parallel over the calling OpenMP team's
// threads (or over a new team when called outside one).
#include <cstdint>

#include "megatron/core/dtype.h"

namespace megatron::kernels::cpu {

// True when this build compiled the AVX2 + FMA kernel and the CPU can run it.
bool packed_gemm_available();

// T is float or bf16_t (both operands the same type). Throws when !packed_gemm_available().
template <typename T>
void packed_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const T* A, int64_t lda, const T* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, const float* bias = nullptr);

}  // namespace megatron::kernels::cpu
