// kernels::cpu::gemm_bf16 against a double-accumulation reference over the same bf16 values:
// every transpose, padded strides, bias in fp32 and bf16, fp32 and bf16 outputs, accumulation.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/gemm.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

std::vector<bf16_t> to_bf16(const std::vector<float>& v) {
  std::vector<bf16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i].bits = math::float_to_bf16_bits(v[i]);
  return out;
}
float f32(bf16_t b) { return math::bf16_bits_to_float(b.bits); }

struct Case {
  int64_t M, N, K;
};

TEST(GemmBf16, MatchesDoubleReference) {
  if (!cpu::native_bf16_gemm()) GTEST_SKIP() << "no bf16 GEMM kernel on this CPU";
  // The last three are long enough in N, M and K to run as chunks (gemm.cpp's kLongDim).
  const Case cases[] = {{1, 1, 1},     {3, 7, 5},     {33, 65, 17},  {127, 3, 64},
                        {64, 96, 200}, {3, 16500, 5}, {16500, 3, 5}, {2, 3, 16500}};
  uint32_t seed = 11;
  for (const Case& c : cases)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (DType c_dtype : {DType::F32, DType::BF16})
          for (int bias_kind : {0, 1, 2})  // none, fp32, bf16
            for (bool accumulate : {false, true}) {
              SCOPED_TRACE(::testing::Message()
                           << "M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << ta
                           << " tb=" << tb << " c=" << dtype_name(c_dtype) << " bias=" << bias_kind
                           << " acc=" << accumulate);
              const int64_t a_rows = ta ? c.K : c.M, a_cols = ta ? c.M : c.K;
              const int64_t b_rows = tb ? c.N : c.K, b_cols = tb ? c.K : c.N;
              const int64_t lda = a_cols + 3, ldb = b_cols + 2, ldc = c.N + 5;
              const auto A = to_bf16(testing::random_vector(a_rows * lda, seed++));
              const auto B = to_bf16(testing::random_vector(b_rows * ldb, seed++));
              const auto bias32 = testing::random_vector(c.N, seed++);
              const auto bias16 = to_bf16(bias32);
              const auto C0 = testing::random_vector(c.M * ldc, seed++);
              std::vector<float> C32 = C0;
              const std::vector<bf16_t> C16_0 = to_bf16(C0);
              std::vector<bf16_t> C16 = C16_0;
              cpu::Bf16Gemm g;
              g.trans_a = ta, g.trans_b = tb, g.M = c.M, g.N = c.N, g.K = c.K;
              g.A = A.data(), g.lda = lda, g.B = B.data(), g.ldb = ldb;
              g.C = c_dtype == DType::F32 ? static_cast<void*>(C32.data()) : C16.data();
              g.c_dtype = c_dtype, g.ldc = ldc, g.accumulate = accumulate;
              if (bias_kind == 1) g.bias = bias32.data(), g.bias_dtype = DType::F32;
              if (bias_kind == 2) g.bias = bias16.data(), g.bias_dtype = DType::BF16;
              cpu::gemm_bf16(g);
              for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = 0; j < c.N; ++j) {
                  double ref = 0, mag = 0;
                  for (int64_t k = 0; k < c.K; ++k) {
                    const double a = f32(ta ? A[k * lda + i] : A[i * lda + k]);
                    const double b = f32(tb ? B[j * ldb + k] : B[k * ldb + j]);
                    ref += a * b;
                    mag += std::fabs(a * b);
                  }
                  if (bias_kind == 1) ref += bias32[j];
                  if (bias_kind == 2) ref += f32(bias16[j]);
                  const double old =
                      c_dtype == DType::F32 ? C0[i * ldc + j] : f32(C16_0[i * ldc + j]);
                  if (accumulate) ref += old, mag += std::fabs(old);
                  const double got =
                      c_dtype == DType::F32 ? C32[i * ldc + j] : f32(C16[i * ldc + j]);
                  // fp32 accumulation error, plus one bf16 rounding of the output.
                  const double tol =
                      1e-5 * (mag + 1) + (c_dtype == DType::BF16 ? std::fabs(ref) / 128 : 0);
                  ASSERT_NEAR(got, ref, tol) << "at (" << i << ", " << j << ")";
                }
              // Padding columns of C are never written.
              for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = c.N; j < ldc; ++j) {
                  if (c_dtype == DType::F32)
                    ASSERT_EQ(C32[i * ldc + j], C0[i * ldc + j]);
                  else
                    ASSERT_EQ(C16[i * ldc + j].bits, math::float_to_bf16_bits(C0[i * ldc + j]));
                }
            }
}

TEST(GemmBf16, BiasGradOfBf16MatchesFp32) {
  const int64_t M = 37, N = 150;
  const auto d32 = testing::random_vector(M * N, 5);
  const auto d16 = to_bf16(d32);
  std::vector<float> widened(M * N), a(N, 0.25f), b(N, 0.25f);
  for (int64_t i = 0; i < M * N; ++i) widened[i] = f32(d16[i]);
  cpu::bias_grad(widened.data(), M, N, a.data());
  cpu::bias_grad(d16.data(), M, N, b.data());
  EXPECT_EQ(a, b);  // same values, same summation order
}

// Without bf16 instructions nothing calls it (bf16 layers widen to fp32 GEMMs); a call is a clear
// error, not oneDNN's "could not create a primitive descriptor".
TEST(GemmBf16, WithoutBf16InstructionsItRefusesByName) {
  if (cpu::native_bf16_gemm()) GTEST_SKIP() << "this CPU has a bf16 GEMM kernel";
  std::vector<bf16_t> A(4), B(4);
  std::vector<float> C(4);
  cpu::Bf16Gemm g;
  g.M = g.N = g.K = g.lda = g.ldb = g.ldc = 2;
  g.A = A.data(), g.B = B.data(), g.C = C.data();
  try {
    cpu::gemm_bf16(g);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no bf16 GEMM kernel"), std::string::npos) << e.what();
  }
}

TEST(GemmBf16, BadOutputDtypeIsAnError) {
  std::vector<bf16_t> A(4), B(4);
  std::vector<float> C(4);
  cpu::Bf16Gemm g;
  g.M = g.N = g.K = g.lda = g.ldb = g.ldc = 2;
  g.A = A.data(), g.B = B.data(), g.C = C.data(), g.c_dtype = DType::I32;
  EXPECT_THROW(cpu::gemm_bf16(g), std::exception);
}

}  // namespace
}  // namespace megatron::kernels
