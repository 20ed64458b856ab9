#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <vector>

namespace megatron::kernels::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  if (M == 0 || N == 0) return;
  if (bias) {
    // Seed C with beta*C + bias so one BLAS call finishes the job with beta = 1.
#pragma omp parallel for schedule(static) if (M * N > 16384)
    for (int64_t i = 0; i < M; ++i) {
      float* row = C + i * ldc;
      if (beta == 0.0f) {
        for (int64_t j = 0; j < N; ++j) row[j] = bias[j];
      } else {
        for (int64_t j = 0; j < N; ++j) row[j] = beta * row[j] + bias[j];
      }
    }
    beta = 1.0f;
  }
  if (K == 0) {
    if (!bias) {
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
          C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    }
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(M), static_cast<int>(N),
              static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias) {
  // Column sums; each thread owns a block of columns so the result is deterministic.
#pragma omp parallel for schedule(static) if (M * N > 16384)
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t j1 = j0 + 64 < N ? j0 + 64 : N;
    float acc[64] = {};
    for (int64_t i = 0; i < M; ++i) {
      const float* row = dout + i * N;
      for (int64_t j = j0; j < j1; ++j) acc[j - j0] += row[j];
    }
    for (int64_t j = j0; j < j1; ++j) dbias[j] += acc[j - j0];
  }
}

}  // namespace megatron::kernels::cpu
