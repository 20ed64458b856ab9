// The CUDA GEMMs (all transposes, bias, beta, bias gradients, strided batches, empty K, bf16
// inputs into fp32 outputs, the GELU epilogues) and attention (unfused against the CPU; flash
// against the CPU where the fused path is supported) on the same inputs as the CPU kernels, for
// each storage type, as in test_cuda_kernels.cpp: norm-relative errors, per-dtype tolerances.
// Without a CUDA build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/gemm.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaKernelsGemmAttention, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
using kc::testing::CudaOps;
using kc::testing::Dev;
using kc::testing::DevRaw;
using kc::testing::dtype_of;
using kc::testing::gemm_ctx;
using kc::testing::randn;
using kc::testing::rounded;
using kc::testing::StorageNames;
using kc::testing::StorageTypes;
using kc::testing::tol;
using kc::testing::Workspace;
using megatron::DType;

TYPED_TEST_SUITE(CudaOps, StorageTypes, StorageNames);

TYPED_TEST(CudaOps, GemmAllTransposesBiasAndBeta) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t M = 37, N = 53, K = 71;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool with_bias : {false, true}) {
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
        const auto A = rounded<T>(randn((ta ? K : M) * lda, 23));
        const auto B = rounded<T>(randn((tb ? N : K) * ldb, 24));
        const auto C0 = rounded<T>(randn(M * ldc, 25));
        const auto bias = rounded<T>(randn(N, 26));
        std::vector<float> C = C0;
        kp::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, C.data(), ldc,
                 with_bias ? bias.data() : nullptr);
        Dev<T> dA(A), dB(B), dC(C0), dbias(bias);
        kc::gemm<T>(gemm_ctx(), ta, tb, M, N, K, 0.5f, dA.p(), lda, dB.p(), ldb, 0.25f, dC.p(), ldc,
                    with_bias ? dbias.p() : nullptr, nullptr);
        EXPECT_CLOSE(dC.get(), C, tol<T>()) << "ta=" << ta << " tb=" << tb << " bias=" << with_bias;
      }
    }
  }
}

TYPED_TEST(CudaOps, BiasGrad) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t M = 1000, N = 77;
  const auto dout = rounded<T>(randn(M * N, 27));
  std::vector<float> db = randn(N, 28);
  const auto db0 = db;
  kp::bias_grad(dout.data(), M, N, db.data());
  Dev<T> ddout(dout);
  Dev<float> ddb(db0);
  Workspace ws(kc::bias_grad_workspace_bytes(M, N));
  kc::bias_grad(ddout.p(), M, N, ddb.p(), ws.p(), nullptr);
  EXPECT_CLOSE(ddb.get(), db, 1e-5);
}

// ---- attention --------------------------------------------------------------------------------

struct AttnCase {
  megatron::kernels::AttentionShape shape;
  bool causal;
  bool key_mask;
  float dropout;
};

template <typename T>
void check_attention(const AttnCase& c) {
  const megatron::kernels::AttentionShape& s = c.shape;
  const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
  const int64_t n_probs = s.B * s.H * s.S * s.S;
  const auto qkv = rounded<T>(randn(n_qkv, 29));
  const auto dout = rounded<T>(randn(n_out, 30));
  std::vector<uint8_t> mask(s.B * s.S, 1);
  for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
  for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // sample 1: a prefix
  megatron::kernels::AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(float(s.Dh));
  opt.causal = c.causal;
  opt.key_mask = c.key_mask ? mask.data() : nullptr;
  opt.dropout_p = c.dropout;
  opt.seed = 99;
  opt.stream = 5;
  std::vector<float> out(n_out), probs(n_probs), dqkv(n_qkv);
  kp::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
  kp::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());

  DevRaw<uint8_t> dmask(mask);
  megatron::kernels::AttentionOptions gopt = opt;
  gopt.key_mask = c.key_mask ? dmask.p() : nullptr;
  Dev<T> dqkv_in(qkv), dout_dev(dout), dres(n_out), ddqkv(n_qkv);
  Dev<float> dprobs(n_probs);
  Workspace wf(kc::attention_forward_workspace_bytes(s, sizeof(T)));
  Workspace wb(kc::attention_backward_workspace_bytes(s, sizeof(T)));
  kc::attention_forward(gemm_ctx(), s, gopt, dqkv_in.p(), dres.p(), dprobs.p(), wf.p(), nullptr);
  kc::attention_backward(gemm_ctx(), s, gopt, dqkv_in.p(), dprobs.p(), dout_dev.p(), ddqkv.p(),
                         wb.p(), nullptr);
  const auto gprobs = dprobs.get();
  EXPECT_CLOSE(gprobs, probs, 1e-4);
  int64_t zero_mismatch = 0;  // masked (and fully masked) entries are exactly 0 on both
  for (int64_t i = 0; i < n_probs; ++i) zero_mismatch += (gprobs[i] == 0.0f) != (probs[i] == 0.0f);
  EXPECT_EQ(zero_mismatch, 0);
  EXPECT_CLOSE(dres.get(), out, tol<T>());
  // Backward chains several roundings to T (dropped probs, dS): allow 3x the storage tolerance.
  EXPECT_CLOSE(ddqkv.get(), dqkv, 3 * tol<T>());
}

const AttnCase kAttnCases[] = {
    {{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f},   // GQA, causal, holes, dropout, offsets
    {{37, 2, 4, 4, 16}, false, false, 0.0f},          // plain MHA
    {{64, 1, 6, 2, 32}, true, false, 0.0f},           // causal GQA, no mask
    {{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f},  // MQA with padding and dropout
};

TYPED_TEST(CudaOps, AttentionUnfusedMatchesCpu) {
  REQUIRE_GPU();
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(::testing::Message()
                 << "S=" << c.shape.S << " H=" << c.shape.H << " G=" << c.shape.G
                 << " causal=" << c.causal << " mask=" << c.key_mask << " p=" << c.dropout);
    check_attention<TypeParam>(c);
  }
}

TEST(CudaKernels, FlashAttentionReportsWhatIsMissing) {
  // Host-only: the support query names the missing piece (no GPU needed).
  const megatron::kernels::AttentionShape s{128, 1, 4, 4, 64};
  megatron::kernels::AttentionOptions opt;
  opt.scale = 0.125f;
  opt.causal = true;
  const kc::FlashAttentionSupport support = kc::flash_attention_support(s, opt, DType::BF16);
  if (!support.supported) {
    EXPECT_NE(support.reason.find("cuDNN"), std::string::npos) << support.reason;
    GTEST_SKIP() << "fused attention unavailable: " << support.reason;
  }
}

TEST(CudaKernels, FlashAttentionMatchesUnfused) {
  REQUIRE_GPU();
  const megatron::kernels::AttentionShape s{128, 2, 4, 2, 64};
  megatron::kernels::AttentionOptions opt;
  opt.scale = 0.125f;
  opt.causal = true;
  const kc::FlashAttentionSupport support = kc::flash_attention_support(s, opt, DType::BF16);
  if (!support.supported) GTEST_SKIP() << support.reason;
  using T = __nv_bfloat16;
  const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
  const auto qkv = rounded<T>(randn(n_qkv, 31)), dout = rounded<T>(randn(n_out, 32));
  std::vector<float> out(n_out), probs(s.B * s.H * s.S * s.S), dqkv(n_qkv);
  kp::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
  kp::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
  Dev<T> dq(qkv), ddo(dout), dres(n_out), ddq(n_qkv);
  Dev<float> lse(s.B * s.H * s.S);
  Workspace ws(size_t(64) << 20);
  kc::flash_attention_forward(s, opt, dq.p(), dres.p(), lse.p(), ws.p(), nullptr);
  kc::flash_attention_backward(s, opt, dq.p(), dres.p(), lse.p(), ddo.p(), ddq.p(), ws.p(),
                               nullptr);
  EXPECT_CLOSE(dres.get(), out, tol<T>());
  EXPECT_CLOSE(ddq.get(), dqkv, 3 * tol<T>());
}

// ---- GEMM variants ------------------------------------------------------------------------------

TEST(CudaKernels, GemmBf16InputsIntoFp32OutputAccumulates) {
  REQUIRE_GPU();
  using T = __nv_bfloat16;
  const int64_t M = 64, N = 48, K = 200;
  const auto A = rounded<T>(randn(K * M, 33)), B = rounded<T>(randn(K * N, 34));
  std::vector<float> C = randn(M * N, 35);
  const auto C0 = C;
  // dW += X^T dY: trans_a, fp32 main grad accumulation (beta = 1)
  kp::gemm(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 1.0f, C.data(), N);
  Dev<T> dA(A), dB(B);
  Dev<float> dC(C0);
  kc::GemmArgs g;
  g.trans_a = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.beta = 1.0f;
  g.A = dA.p();
  g.lda = M;
  g.B = dB.p();
  g.ldb = N;
  g.C = dC.p();
  g.ldc = N;
  g.ab_type = DType::BF16;
  g.c_type = DType::F32;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(dC.get(), C, 1e-5);
}

TEST(CudaKernels, GemmStridedBatchedAndEmptyK) {
  REQUIRE_GPU();
  const int64_t M = 9, N = 11, K = 13, batch = 5;
  const auto A = randn(batch * M * K, 36), B = randn(batch * N * K, 37);
  std::vector<float> C(batch * M * N, 0.0f);
  for (int64_t b = 0; b < batch; ++b)
    kp::gemm(false, true, M, N, K, 1.0f, A.data() + b * M * K, K, B.data() + b * N * K, K, 0.0f,
             C.data() + b * M * N, N);
  Dev<float> dA(A), dB(B), dC(batch * M * N);
  kc::GemmArgs g;
  g.trans_b = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = dA.p();
  g.lda = K;
  g.stride_a = M * K;
  g.B = dB.p();
  g.ldb = K;
  g.stride_b = N * K;
  g.C = dC.p();
  g.ldc = N;
  g.stride_c = M * N;
  g.batch = batch;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(dC.get(), C, 1e-5);

  // K == 0: C = beta * C + bias, as the CPU gemm
  std::vector<float> C2 = randn(M * N, 38);
  const auto C20 = C2;
  const auto bias = randn(N, 39);
  kp::gemm(false, false, M, N, 0, 1.0f, A.data(), 1, B.data(), N, 0.5f, C2.data(), N, bias.data());
  Dev<float> dC2(C20), dbias(bias);
  kc::gemm<float>(gemm_ctx(), false, false, M, N, 0, 1.0f, dA.p(), 1, dB.p(), N, 0.5f, dC2.p(), N,
                  dbias.p(), nullptr);
  EXPECT_CLOSE(dC2.get(), C2, 1e-6);
}

template <typename T>
void check_gelu_epilogues() {
  // fc1 forward with GELU_AUX_BIAS, backward through DGELU: against the CPU gemm + gelu kernels.
  // cuBLASLt's GELU is its own tanh approximation: compare at 2e-3 (plus the storage rounding).
  const int64_t M = 64, N = 96, K = 80;
  const double t = std::max(2e-3, tol<T>());
  const auto X = rounded<T>(randn(M * K, 40)), W = rounded<T>(randn(N * K, 41, 0.2f));
  const auto bias = rounded<T>(randn(N, 42, 0.1f)), dY = rounded<T>(randn(M * N, 43));
  const auto W2 = rounded<T>(randn(N * N, 44, 0.2f));
  std::vector<float> pre(M * N), act(M * N);
  kp::gemm(false, true, M, N, K, 1.0f, X.data(), K, W.data(), K, 0.0f, pre.data(), N, bias.data());
  kp::gelu_forward(pre.data(), act.data(), M * N);
  Dev<T> dX(X), dW(W), dbias(bias), dact(M * N), daux(M * N);
  kc::GemmArgs g;
  g.trans_b = true;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = dX.p();
  g.lda = K;
  g.B = dW.p();
  g.ldb = K;
  g.C = dact.p();
  g.ldc = N;
  g.ab_type = g.c_type = dtype_of<T>();
  g.epilogue = kc::GemmEpilogue::BiasGeluAux;
  g.bias = dbias.p();
  g.aux = daux.p();
  g.ld_aux = N;
  gemm_ctx().run(g, nullptr);
  EXPECT_CLOSE(daux.get(), pre, tol<T>());
  EXPECT_CLOSE(dact.get(), act, t);

  // d(pre) = (dY W2) * gelu'(pre), with pre from aux
  std::vector<float> dact_ref(M * N), dpre(M * N);
  kp::gemm(false, false, M, N, N, 1.0f, dY.data(), N, W2.data(), N, 0.0f, dact_ref.data(), N);
  const auto pre_r = rounded<T>(pre);
  kp::gelu_backward(pre_r.data(), dact_ref.data(), dpre.data(), M * N);
  Dev<T> ddY(dY), dW2(W2), ddpre(M * N);
  kc::GemmArgs b;
  b.M = M;
  b.N = N;
  b.K = N;
  b.A = ddY.p();
  b.lda = N;
  b.B = dW2.p();
  b.ldb = N;
  b.C = ddpre.p();
  b.ldc = N;
  b.ab_type = b.c_type = dtype_of<T>();
  b.epilogue = kc::GemmEpilogue::DGelu;
  b.aux = daux.p();
  b.ld_aux = N;
  gemm_ctx().run(b, nullptr);
  EXPECT_CLOSE(ddpre.get(), dpre, t);
}

TEST(CudaKernels, GemmGeluEpiloguesBf16) {
  REQUIRE_GPU();
  check_gelu_epilogues<__nv_bfloat16>();
}

TEST(CudaKernels, GemmGeluEpiloguesFp16) {
  REQUIRE_GPU();
  check_gelu_epilogues<__half>();
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
