// Attention sinks on CUDA (kernels/cuda/attention_sinks.h) against the CPU kernels
// (kernels/cpu/attention_sinks.h) on the same rounded inputs, for each storage type: the
// forward's in-place scaling, the backward's scaled gradient (also in place: dout_scaled ==
// dout) and the sinks' gradient added into what was there, with a fully masked row (lse -inf)
// and fixed sinks (no gradient). The KV-cached decoder with sinks: test_cuda_kernels_kv_attention;
// GPT-OSS's blocks training on the GPU: test_cuda_moe_training; decoding them:
// test_cuda_inference. Without a CUDA build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention_sinks.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_sinks.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaAttentionSinks, BuiltWithoutCuda) {
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
using megatron::kernels::AttentionShape;

TYPED_TEST_SUITE(CudaOps, StorageTypes, StorageNames);

TYPED_TEST(CudaOps, AttentionSinksMatchTheCpu) {
  REQUIRE_GPU();
  using T = TypeParam;
  // Dh 72: rows longer than a warp with a tail; B * S rows not a multiple of the block's warps.
  for (const AttentionShape s : {AttentionShape{13, 3, 5, 5, 72}, AttentionShape{1, 1, 2, 1, 8},
                                 AttentionShape{40, 2, 8, 2, 64}}) {
    const int64_t n = s.S * s.B * s.H * s.Dh, rows = s.B * s.H * s.S;
    SCOPED_TRACE(::testing::Message() << "S " << s.S << " B " << s.B << " H " << s.H);
    const std::vector<float> sinks = randn(s.H, 5, 2.0f);
    std::vector<float> lse = randn(rows, 6, 2.0f);
    lse[rows / 2] = -INFINITY;  // a fully masked row
    auto out = rounded<T>(randn(n, 7));
    for (int64_t d = 0; d < s.Dh; ++d) {  // its output is zeros, as the flash kernels leave it
      const int64_t b = (rows / 2) / (s.H * s.S), h = (rows / 2) / s.S % s.H, q = (rows / 2) % s.S;
      out[((q * s.B + b) * s.H + h) * s.Dh + d] = 0.0f;
    }
    const auto dout = rounded<T>(randn(n, 8));
    const std::vector<float> dsinks0 = randn(s.H, 9);  // the gradient so far: added to
    Dev<float> d_sinks(sinks), d_lse(lse), d_dsinks(dsinks0);
    Dev<T> d_out(out), d_dout(dout), d_scaled(n);

    std::vector<float> scaled_out = out;
    kp::attention_sinks_forward(s, sinks.data(), lse.data(), scaled_out.data());
    kc::attention_sinks_forward<T>(s, d_sinks.p(), d_lse.p(), d_out.p(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_CLOSE(d_out.get(), scaled_out, tol<T>());

    // The backward from the device's scaled output (rounded to T), as the layer runs it.
    const std::vector<float> gpu_out = d_out.get();
    std::vector<float> scaled(n), dsinks = dsinks0;
    kp::attention_sinks_backward(s, sinks.data(), lse.data(), gpu_out.data(), dout.data(),
                                 scaled.data(), dsinks.data());
    kc::attention_sinks_backward<T>(s, d_sinks.p(), d_lse.p(), d_out.p(), d_dout.p(), d_scaled.p(),
                                    d_dsinks.p(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_CLOSE(d_scaled.get(), scaled, tol<T>());
    // Sums of products of T-rounded inputs in double on both sides: close in every dtype.
    EXPECT_CLOSE(d_dsinks.get(), dsinks, 1e-5);
    const std::vector<float> first = d_dsinks.get();
    // Run to run the same bits (one block per head, a fixed order).
    d_dsinks.set(dsinks0);
    kc::attention_sinks_backward<T>(s, d_sinks.p(), d_lse.p(), d_out.p(), d_dout.p(), d_scaled.p(),
                                    d_dsinks.p(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_dsinks.get(), first);

    // In place (dout_scaled == dout) and fixed sinks (no gradient): the same scaled gradient.
    kc::attention_sinks_backward<T>(s, d_sinks.p(), d_lse.p(), d_out.p(), d_dout.p(), d_dout.p(),
                                    nullptr, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_dout.get(), d_scaled.get());
  }
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
