// The per-head query/key RMSNorm (model.qk_layernorm, Qwen3) on CUDA against the CPU kernel on the
// same inputs: y, rstd, dx (also written over dy, as the attention layer calls it) and the
// accumulated weight gradients, for each storage type with fp32 and storage-typed weights, MHA
// and GQA; the weight gradients are the same bits on a second run. SKIPPED without a GPU.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/norm.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/qk_norm.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaQkNorm, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
using kc::testing::CudaOps;
using kc::testing::Dev;
using kc::testing::randn;
using kc::testing::rounded;
using kc::testing::StorageNames;
using kc::testing::StorageTypes;
using kc::testing::tol;
using kc::testing::Workspace;

TYPED_TEST_SUITE(CudaOps, StorageTypes, StorageNames);

// W: the weights' storage type (float, or T itself).
template <typename T, typename W>
void check_qk_norm(int64_t groups, int64_t q_slots, int64_t Dh) {
  const int64_t slots = q_slots + 2, n = groups * slots * Dh, n_rstd = groups * (q_slots + 1);
  const auto x = rounded<T>(randn(n, 51, 1.5f)), dy = rounded<T>(randn(n, 52));
  const auto wq = rounded<W>(randn(Dh, 53, 0.3f, 1.0f)), wk = rounded<W>(randn(Dh, 54, 0.3f, 1.0f));
  std::vector<float> y(n), rstd(n_rstd), dx(n), dwq = randn(Dh, 55), dwk = randn(Dh, 56);
  const std::vector<float> dwq0 = dwq, dwk0 = dwk;
  kp::qk_rmsnorm_forward(x.data(), wq.data(), wk.data(), y.data(), rstd.data(), groups, q_slots, Dh,
                         1e-6f);
  kp::qk_rmsnorm_backward(x.data(), wq.data(), wk.data(), rstd.data(), dy.data(), dx.data(),
                          dwq.data(), dwk.data(), groups, q_slots, Dh);

  Dev<T> d_x(x), d_y(n), d_dy(dy);
  Dev<W> d_wq(wq), d_wk(wk);
  Dev<float> d_rstd(n_rstd), d_dwq(dwq0), d_dwk(dwk0);
  kc::qk_rmsnorm_forward<T, W>(d_x.p(), d_wq.p(), d_wk.p(), d_y.p(), d_rstd.p(), groups, q_slots,
                               Dh, 1e-6f, nullptr);
  EXPECT_CLOSE(d_y.get(), y, tol<T>());
  EXPECT_CLOSE(d_rstd.get(), rstd, 1e-5);
  Workspace ws(kc::qk_rmsnorm_backward_workspace_bytes(groups, Dh));
  // dx written over dy, as SelfAttention's backward passes them.
  kc::qk_rmsnorm_backward<T, W>(d_x.p(), d_wq.p(), d_wk.p(), d_rstd.p(), d_dy.p(), d_dy.p(),
                                d_dwq.p(), d_dwk.p(), groups, q_slots, Dh, ws.p(), nullptr);
  EXPECT_CLOSE(d_dy.get(), dx, 2 * tol<T>());
  EXPECT_CLOSE(d_dwq.get(), dwq, 1e-4);
  EXPECT_CLOSE(d_dwk.get(), dwk, 1e-4);
  // Deterministic: a second backward from the same start gives the same bits.
  const auto first_q = d_dwq.get(), first_k = d_dwk.get();
  Dev<T> d_dy2(dy);
  Dev<float> d_dwq2(dwq0), d_dwk2(dwk0);
  kc::qk_rmsnorm_backward<T, W>(d_x.p(), d_wq.p(), d_wk.p(), d_rstd.p(), d_dy2.p(), d_dy2.p(),
                                d_dwq2.p(), d_dwk2.p(), groups, q_slots, Dh, ws.p(), nullptr);
  EXPECT_EQ(d_dwq2.get(), first_q);
  EXPECT_EQ(d_dwk2.get(), first_k);
}

TYPED_TEST(CudaOps, QkRmsNormMatchesCpu) {
  REQUIRE_GPU();
  using T = TypeParam;
  // (groups, q_slots, Dh): MHA, GQA with Dh 128 and more groups than one weight-gradient chunk,
  // MQA with an odd head dim.
  for (const auto& [groups, q_slots, Dh] :
       {std::array<int64_t, 3>{24, 1, 64}, std::array<int64_t, 3>{150, 4, 128},
        std::array<int64_t, 3>{7, 6, 40}}) {
    SCOPED_TRACE(testing::Message()
                 << "groups=" << groups << " q_slots=" << q_slots << " Dh=" << Dh);
    check_qk_norm<T, float>(groups, q_slots, Dh);
    if constexpr (!std::is_same_v<T, float>) check_qk_norm<T, T>(groups, q_slots, Dh);
  }
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
