#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/reference/gemm.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

struct GemmCase {
  int64_t M, N, K;
};

// All four transpose combinations, with and without bias, beta 0 and non-zero, on odd shapes
// whose leading dimensions are padded past the matrix width.
TEST(Gemm, MatchesReferenceAllTransposesAndStrides) {
  // The last two are long enough in N and M to run as chunks (gemm.cpp's kLongDim).
  const GemmCase cases[] = {{1, 1, 1},    {3, 7, 5},     {33, 65, 17}, {127, 3, 64},
                            {7, 127, 33}, {3, 16500, 5}, {16500, 3, 5}};
  uint32_t seed = 1;
  for (const GemmCase& c : cases) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (bool with_bias : {false, true}) {
          for (float beta : {0.0f, 0.5f}) {
            SCOPED_TRACE(::testing::Message()
                         << "M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta
                         << " tb=" << tb << " bias=" << with_bias << " beta=" << beta);
            const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
            const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
            const int64_t lda = a_cols + 3, ldb = b_cols + 2, ldc = c.N + 5;
            const auto A = random_vector(a_rows * lda, seed++);
            const auto B = random_vector(b_rows * ldb, seed++);
            const auto bias = random_vector(c.N, seed++);
            auto C = random_vector(c.M * ldc, seed++);
            if (beta == 0.0f) {  // beta = 0 must not read C: poison the matrix part
              for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = 0; j < c.N; ++j) C[i * ldc + j] = NAN;
            }
            auto C_ref = C;
            const float* b = with_bias ? bias.data() : nullptr;
            cpu::gemm(ta, tb, c.M, c.N, c.K, 0.7f, A.data(), lda, B.data(), ldb, beta, C.data(),
                      ldc, b);
            ref::gemm(ta, tb, c.M, c.N, c.K, 0.7f, A.data(), lda, B.data(), ldb, beta, C_ref.data(),
                      ldc, b);
            EXPECT_TRUE(all_close(C, C_ref, 1e-5));  // includes the padding: left untouched
          }
        }
      }
    }
  }
}

TEST(Gemm, EmptyInnerDimensionGivesBetaCPlusBias) {
  const int64_t M = 3, N = 4;
  const auto bias = random_vector(N, 1);
  auto C = random_vector(M * N, 2);
  const auto C0 = C;
  cpu::gemm(false, false, M, N, 0, 1.0f, nullptr, 1, nullptr, N, 0.5f, C.data(), N, bias.data());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) EXPECT_FLOAT_EQ(C[i * N + j], 0.5f * C0[i * N + j] + bias[j]);
  cpu::gemm(false, false, M, N, 0, 1.0f, nullptr, 1, nullptr, N, 0.0f, C.data(), N);
  for (float c : C) EXPECT_EQ(c, 0.0f);
}

TEST(BiasGrad, MatchesReferenceAndAccumulates) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {7, 3}, {33, 65}, {127, 130}, {300, 200}};
  for (auto [M, N] : shapes) {
    const auto dout = random_vector(M * N, uint32_t(M * 1000 + N));
    const auto initial = random_vector(N, 5);
    auto db = initial, db_ref = initial;
    cpu::bias_grad(dout.data(), M, N, db.data());
    ref::bias_grad(dout.data(), M, N, db_ref.data());
    EXPECT_TRUE(all_close(db, db_ref, 1e-6)) << M << "x" << N;
    std::vector<double> colsum(N, 0.0);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) colsum[j] += dout[i * N + j];
    for (int64_t j = 0; j < N; ++j) EXPECT_NEAR(db[j], initial[j] + colsum[j], 1e-4);
  }
}

// The linear layer y = x W^T + b as the model composes it from gemm and bias_grad:
// dx = dy W (written), dW += dy^T x, db += colsum(dy). Checked by central differences of
// sum(w * y) with dy = w.
TEST(Gemm, LinearLayerGradientsByFiniteDifferences) {
  const int64_t N = 5, in = 7, out = 6;
  const auto x = random_vector(N * in, 1), W = random_vector(out * in, 2);
  const auto b = random_vector(out, 3), w = random_vector(N * out, 4);
  auto forward = [&](const std::vector<float>& xx, const std::vector<float>& WW,
                     const std::vector<float>& bb) {
    std::vector<float> y(N * out);
    ref::gemm(false, true, N, out, in, 1.0f, xx.data(), in, WW.data(), in, 0.0f, y.data(), out,
              bb.data());
    return testing::weighted_sum(w, y);
  };
  auto dx = testing::nan_vector(N * in);
  cpu::gemm(false, false, N, in, out, 1.0f, w.data(), out, W.data(), in, 0.0f, dx.data(), in);
  const auto dW0 = random_vector(out * in, 5), db0 = random_vector(out, 6);
  auto dW = dW0, db = db0;
  cpu::gemm(true, false, out, in, N, 1.0f, w.data(), out, x.data(), in, 1.0f, dW.data(), in);
  cpu::bias_grad(w.data(), N, out, db.data());

  std::vector<float> dW_fresh(out * in), db_fresh(out);
  for (size_t i = 0; i < dW.size(); ++i) dW_fresh[i] = dW[i] - dW0[i];
  for (size_t i = 0; i < db.size(); ++i) db_fresh[i] = db[i] - db0[i];
  EXPECT_TRUE(testing::check_gradient(x, dx, [&](const auto& v) { return forward(v, W, b); }));
  EXPECT_TRUE(
      testing::check_gradient(W, dW_fresh, [&](const auto& v) { return forward(x, v, b); }));
  EXPECT_TRUE(
      testing::check_gradient(b, db_fresh, [&](const auto& v) { return forward(x, W, v); }));
}

}  // namespace
}  // namespace megatron::kernels
