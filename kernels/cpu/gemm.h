#pragma once
// Row-major GEMM through CBLAS: C[M,N] = alpha * op(A) @ op(B) + beta * C (+ bias[N] per row).
// op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when trans_b).
// lda/ldb/ldc are row strides of the stored matrices. bias may be null.
#include <cstdint>

namespace megatron::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);

// dbias[N] += sum over rows of dout[M,N].
void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias);

}  // namespace megatron::kernels::cpu
