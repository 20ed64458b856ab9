// The CUDA KV-cache attention (kernels/cuda/kv_attention.h) against the CPU kernel
// (kernels/cpu/kv_attention.h) on the same rounded inputs, for each storage type: decode steps
// (S = 1) and prefills (S > 1), with and without earlier cached positions, sliding windows,
// GQA/MQA, head dims up to 256, caches longer than one block's first pass of tiles, with and
// without soft-capped scores, with and without attention sinks (GPT-OSS); then a whole decode
// (prefill and steps, soft-capped, with sinks) chained
// through device-resident caches. Outputs compare by
// norm-relative error (per-dtype tolerances), the appended cache rows exactly. Without a CUDA
// build or a GPU every test reports SKIPPED (never passed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/kv_attention.h"
#include "megatron/core/error.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/kv_attention.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudaKernelsKvAttention, BuiltWithoutCuda) {
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

struct Case {
  int64_t S, past, window, B, H, G, Dh, capacity;
  std::string str() const {
    return "S=" + std::to_string(S) + " past=" + std::to_string(past) +
           " window=" + std::to_string(window) + " B=" + std::to_string(B) +
           " H=" + std::to_string(H) + " G=" + std::to_string(G) + " Dh=" + std::to_string(Dh) +
           " capacity=" + std::to_string(capacity);
  }
};

TYPED_TEST(CudaOps, KvCacheAttentionMatchesTheCpu) {
  REQUIRE_GPU();
  using T = TypeParam;
  const std::vector<Case> cases = {
      {1, 0, 0, 1, 4, 4, 16, 8},       // the first decode step: one key
      {1, 17, 0, 2, 4, 2, 64, 32},     // decode over a cache, GQA
      {1, 300, 0, 2, 8, 2, 128, 320},  // longer than 8 warps x 32 keys
      {1, 300, 37, 1, 8, 1, 64, 301},  // sliding window, MQA
      {13, 0, 0, 2, 4, 2, 40, 16},     // a prefill, Dh not a multiple of 32
      {9, 23, 6, 3, 6, 3, 32, 40},     // a chunk after cached positions, window
      {7, 5, 100, 1, 2, 2, 256, 12},   // window wider than the sequence, Dh 256
      {64, 200, 0, 1, 4, 1, 96, 264},  // a long chunk, MQA
  };
  for (const float cap : {0.0f, 1.5f})  // soft-capped scores (Gemma 2) too
    for (const bool with_sinks : {false, true})
      for (const Case& c : cases) {
        // Sinks around the scores' size: each takes a visible share of the denominator.
        const std::vector<float> sinks = randn(c.H, 74, 2.0f);
        Dev<float> dsinks(sinks);
        const float* cpu_sinks = with_sinks ? sinks.data() : nullptr;
        const float* gpu_sinks = with_sinks ? dsinks.p() : nullptr;
        const AttentionShape s{c.S, c.B, c.H, c.G, c.Dh};
        const float scale = 1.0f / std::sqrt(float(c.Dh));
        const int64_t n_qkv = c.S * c.B * (c.H + 2 * c.G) * c.Dh,
                      n_cache = c.B * c.G * c.capacity * c.Dh;
        const auto qkv = rounded<T>(randn(n_qkv, 71, 1.0f));
        // Earlier positions hold what earlier steps appended; the rest of the cache is untouched.
        auto keys = rounded<T>(randn(n_cache, 72)), values = rounded<T>(randn(n_cache, 73));
        Dev<T> dq(qkv), dk(keys), dv(values), dout(c.S * c.B * c.H * c.Dh);
        std::vector<float> out(static_cast<size_t>(c.S * c.B * c.H * c.Dh));
        kp::kv_cache_attention(s, scale, qkv.data(), keys.data(), values.data(), c.past, c.capacity,
                               out.data(), c.window, cap, cpu_sinks);
        kc::kv_cache_attention<T>(s, scale, dq.p(), dk.p(), dv.p(), c.past, c.capacity, dout.p(),
                                  c.window, cap, gpu_sinks, nullptr);
        const std::string what =
            c.str() + " softcap " + std::to_string(cap) + (with_sinks ? " sinks" : "");
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        EXPECT_CLOSE(dout.get(), out, tol<T>()) << what;
        EXPECT_EQ(dk.get(), keys) << c.str();
        EXPECT_EQ(dv.get(), values) << c.str();
      }
}

// A prompt of 11 positions, then 6 single-token steps, the caches never leaving the device:
// every step's output matches the CPU decoding the same sequence.
TYPED_TEST(CudaOps, KvCacheDecodeStepsChainOnTheDevice) {
  REQUIRE_GPU();
  using T = TypeParam;
  const int64_t B = 2, H = 6, G = 2, Dh = 48, prompt = 11, steps = 6, window = 8;
  const float softcap = 2.0f;
  const std::vector<float> sinks = randn(H, 82, 1.0f);
  Dev<float> dsinks(sinks);
  const int64_t capacity = prompt + steps, row = B * (H + 2 * G) * Dh;
  const float scale = 1.0f / std::sqrt(float(Dh));
  const auto qkv = rounded<T>(randn(capacity * row, 81));
  std::vector<float> keys(static_cast<size_t>(B * G * capacity * Dh), 0.0f), values = keys;
  Dev<T> dk(keys), dv(values);
  int64_t past = 0;
  for (int64_t S : std::vector<int64_t>{prompt, 1, 1, 1, 1, 1, 1}) {
    const AttentionShape s{S, B, H, G, Dh};
    const std::vector<float> chunk(qkv.begin() + past * row, qkv.begin() + (past + S) * row);
    std::vector<float> out(static_cast<size_t>(S * B * H * Dh));
    kp::kv_cache_attention(s, scale, chunk.data(), keys.data(), values.data(), past, capacity,
                           out.data(), window, softcap, sinks.data());
    Dev<T> dq(chunk), dout(out.size());
    kc::kv_cache_attention<T>(s, scale, dq.p(), dk.p(), dv.p(), past, capacity, dout.p(), window,
                              softcap, dsinks.p(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "past " << past;
    EXPECT_CLOSE(dout.get(), out, tol<T>()) << "past " << past << " S " << S;
    past += S;
  }
  EXPECT_EQ(dk.get(), keys);
  EXPECT_EQ(dv.get(), values);
}

TEST(CudaKernelsKvAttention, RefusesWhatItDoesNotRun) {
  REQUIRE_GPU();
  Dev<float> buf(64);
  // Dh over 256 and positions past the capacity are errors, not silent overruns.
  EXPECT_THROW(
      kc::kv_cache_attention<float>(AttentionShape{1, 1, 1, 1, 512}, 1.0f, buf.p(), buf.p(),
                                    buf.p(), 0, 1, buf.p(), 0, 0.0f, nullptr, nullptr),
      megatron::Error);
  EXPECT_THROW(kc::kv_cache_attention<float>(AttentionShape{2, 1, 1, 1, 4}, 1.0f, buf.p(), buf.p(),
                                             buf.p(), 3, 4, buf.p(), 0, 0.0f, nullptr, nullptr),
               megatron::Error);
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
