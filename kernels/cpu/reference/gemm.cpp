#include "kernels/cpu/reference/gemm.h"

namespace megatron::kernels::ref {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      double c = double(alpha) * acc;
      if (beta != 0.0f) c += double(beta) * C[i * ldc + j];
      if (bias) c += bias[j];
      C[i * ldc + j] = float(c);
    }
  }
}

void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias) {
  for (int64_t j = 0; j < N; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < M; ++i) acc += dout[i * N + j];
    dbias[j] = float(dbias[j] + acc);
  }
}

}  // namespace megatron::kernels::ref
