// kernels::cpu::packed_gemm (our AVX2 + FMA GEMM) against a naive fp64 reference: every
// transpose combination, tiles cut at every edge (M, N not multiples of 6 / 16, K and N across
// the cache blocks), alpha, beta (beta == 0 never reads C), bias, bf16 operands widened while
// packing, one and two threads, and a call from inside a parallel region. Skipped on a CPU or
// build without AVX2 + FMA.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/packed_gemm.h"

namespace megatron::kernels {
namespace {

struct Case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
  bool bias;
};

using math::bf16_bits_to_float;
using math::float_to_bf16_bits;

float bf16_value(bf16_t x) { return bf16_bits_to_float(x.bits); }

template <typename T>
void check(const Case& c, int threads) {
  std::mt19937 gen(static_cast<uint32_t>(c.M * 131 + c.N * 17 + c.K));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  // Padded leading dimensions: the kernel must honour lda/ldb/ldc, not assume dense rows.
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.N + 2;
  std::vector<T> A(static_cast<size_t>(a_rows * lda)), B(static_cast<size_t>(b_rows * ldb));
  std::vector<double> a(A.size()), b(B.size());
  for (size_t i = 0; i < A.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      A[i] = dist(gen), a[i] = A[i];
    } else {
      A[i] = bf16_t{float_to_bf16_bits(dist(gen))}, a[i] = bf16_value(A[i]);
    }
  }
  for (size_t i = 0; i < B.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      B[i] = dist(gen), b[i] = B[i];
    } else {
      B[i] = bf16_t{float_to_bf16_bits(dist(gen))}, b[i] = bf16_value(B[i]);
    }
  }
  std::vector<float> bias(static_cast<size_t>(c.N));
  for (float& x : bias) x = dist(gen);
  std::vector<float> C(static_cast<size_t>(c.M * ldc));
  for (float& x : C)
    x = c.beta == 0.0f ? std::numeric_limits<float>::quiet_NaN() : dist(gen);  // never read
  const std::vector<float> C0 = C;

  omp_set_num_threads(threads);
  cpu::packed_gemm<T>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta,
                      C.data(), ldc, c.bias ? bias.data() : nullptr);

  double worst = 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double dot = 0, scale = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double x = c.ta ? a[k * lda + i] : a[i * lda + k];
        const double y = c.tb ? b[j * ldb + k] : b[k * ldb + j];
        dot += x * y;
        scale += std::fabs(x * y);
      }
      double want = c.alpha * dot + (c.bias ? bias[j] : 0.0);
      if (c.beta != 0.0f) want += c.beta * C0[i * ldc + j];
      const double err = std::fabs(C[i * ldc + j] - want) / (scale + 1.0);
      worst = std::max(worst, std::isnan(err) ? 1e9 : err);
    }
  EXPECT_LT(worst, 2e-6) << "ta " << c.ta << " tb " << c.tb << " M " << c.M << " N " << c.N << " K "
                         << c.K << " alpha " << c.alpha << " beta " << c.beta << " bias " << c.bias
                         << " threads " << threads;
  // Padding columns of C are untouched.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j) {
      if (!(std::isnan(C0[i * ldc + j]) && std::isnan(C[i * ldc + j]))) {
        ASSERT_EQ(C[i * ldc + j], C0[i * ldc + j]) << "wrote past N at row " << i;
      }
    }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t shapes[][3] = {{1, 1, 1},      {6, 16, 8},     {7, 17, 9},
                               {5, 15, 300},   {13, 40, 513},  {150, 33, 64},
                               {301, 70, 260}, {12, 3100, 20}, {40, 8, 100}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      out.push_back({t / 2 == 1, t % 2 == 1, s[0], s[1], s[2], 1.0f, 0.0f, false});
  out.push_back({false, true, 97, 50, 300, 0.5f, 1.0f, false});  // accumulate
  out.push_back({true, false, 31, 23, 270, 1.0f, 0.25f, true});  // beta and bias
  out.push_back({false, false, 64, 48, 64, -2.0f, 0.0f, true});  // bias, no C read
  out.push_back({true, true, 20, 3090, 257, 1.0f, 1.0f, true});  // across NC and KC blocks
  return out;
}

class PackedGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu::packed_gemm_available()) GTEST_SKIP() << "no AVX2 + FMA (CPU or build)";
    threads_ = omp_get_max_threads();
  }
  void TearDown() override { omp_set_num_threads(threads_); }
  int threads_ = 1;
};

TEST_F(PackedGemm, Fp32MatchesReference) {
  for (int threads : {1, 2})
    for (const Case& c : cases()) check<float>(c, threads);
}

TEST_F(PackedGemm, Bf16OperandsMatchReferenceOnTheirValues) {
  for (int threads : {1, 2})
    for (const Case& c : cases()) check<bf16_t>(c, threads);
}

TEST_F(PackedGemm, RunsOnTheCallingThreadInsideAParallelRegion) {
  const int64_t M = 37, N = 29, K = 41;
  std::vector<float> A(M * K), B(K * N);
  for (size_t i = 0; i < A.size(); ++i) A[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = 0.02f * static_cast<float>(i % 89) - 0.5f;
  std::vector<float> want(M * N);
  omp_set_num_threads(2);
  cpu::packed_gemm<float>(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, want.data(),
                          N);
  std::vector<std::vector<float>> got(2, std::vector<float>(M * N));
#pragma omp parallel num_threads(2)
  cpu::packed_gemm<float>(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                          got[static_cast<size_t>(omp_get_thread_num())].data(), N);
  for (const auto& g : got) EXPECT_EQ(g, want);  // same blocking, same sums: bit-identical
}

}  // namespace
}  // namespace megatron::kernels
