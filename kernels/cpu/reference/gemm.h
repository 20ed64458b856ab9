#pragma once
// Naive reference of kernels/cpu/gemm.h (plain loops, double accumulation).
#include <cstdint>

namespace megatron::kernels::ref {

// beta == 0 ignores C's old contents (as BLAS does).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);
void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias);

}  // namespace megatron::kernels::ref
