// cuDNN's fused attention (megatron/backend/cuda/cudnn_attention.h, model.attention_backend
// fused/auto on cuda) against the CPU's flash attention in fp32 on the same bf16/fp16-rounded
// inputs: out, the log-sum-exp and every element of dqkv, for MHA read in place, GQA with packed
// queries, bidirectional attention and a sliding window; the benchmark shapes must build; what
// cuDNN is not handed is refused with its reason (host-only, no GPU needed). Without a CUDA build
// or a GPU the GPU tests report SKIPPED (never passed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/flash_attention.h"

#ifdef MEGATRON_WITH_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "megatron/backend/cuda/cudnn_attention.h"
#include "tests/support/cuda_kernels_test_util.h"
#endif

namespace {

#ifndef MEGATRON_WITH_CUDA

TEST(CudnnAttention, BuiltWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (-DMEGATRON_CUDA=OFF or no nvcc)";
}

#else

namespace kc = megatron::kernels::cuda;
namespace kp = megatron::kernels::cpu;
namespace mc = megatron::cuda;
using kc::testing::Dev;
using kc::testing::randn;
using kc::testing::rel_error;
using kc::testing::rounded;
using kc::testing::tol;
using megatron::DType;
using megatron::kernels::AttentionOptions;
using megatron::kernels::AttentionShape;

struct Case {
  AttentionShape shape;
  bool causal;
  int64_t window;
};

AttentionOptions options_of(const Case& c) {
  AttentionOptions opt;
  opt.scale = 1.0f / std::sqrt(float(c.shape.Dh));
  opt.causal = c.causal;
  opt.window = c.window;
  opt.cudnn = megatron::kernels::CudnnUse::Always;
  return opt;
}

template <typename T>
void check_against_cpu(const Case& c) {
  const AttentionShape& s = c.shape;
  const AttentionOptions opt = options_of(c);
  const DType dtype = kc::testing::dtype_of<T>();
  const mc::CudnnAttentionSupport support = mc::cudnn_attention_support(s, opt, dtype);
  ASSERT_TRUE(support.supported) << support.reason;
  const int64_t n_qkv = s.S * s.B * (s.H + 2 * s.G) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
  const int64_t n_lse = s.B * s.H * s.S;
  const auto qkv = rounded<T>(randn(n_qkv, 41)), dout = rounded<T>(randn(n_out, 42));
  std::vector<float> out(n_out), lse(n_lse), dqkv(n_qkv);
  kp::flash_attention_forward(s, opt, qkv.data(), out.data(), lse.data());
  kp::flash_attention_backward(s, opt, qkv.data(), out.data(), lse.data(), dout.data(),
                               dqkv.data());

  Dev<T> d_qkv(qkv), d_dout(dout), d_out(n_out), d_dqkv(n_qkv);
  Dev<float> d_lse(n_lse);
  d_dqkv.set(std::vector<float>(n_qkv, 1e4f));  // every element must be overwritten
  mc::cudnn_attention_forward(s, opt, dtype, d_qkv.p(), d_out.p(), d_lse.p(), nullptr);
  mc::cudnn_attention_backward(s, opt, dtype, d_qkv.p(), d_out.p(), d_lse.p(), d_dout.p(),
                               d_dqkv.p(), nullptr);
  EXPECT_LE(rel_error(d_lse.get(), lse), 1e-3) << "lse";
  EXPECT_LE(rel_error(d_out.get(), out), tol<T>()) << "out";
  // Backward chains roundings to T (probabilities, dS) as the flash kernels do.
  EXPECT_LE(rel_error(d_dqkv.get(), dqkv), 3 * tol<T>()) << "dqkv";
}

const Case kCases[] = {
    {{128, 2, 4, 4, 64}, true, 0},   // MHA, causal (GPT): queries read in place from qkv
    {{96, 2, 8, 2, 128}, true, 0},   // GQA, causal, Dh 128 (LLaMA): queries packed, dQ scattered
    {{64, 3, 4, 4, 32}, false, 0},   // bidirectional (BERT)
    {{128, 1, 4, 1, 64}, true, 17},  // MQA with a sliding window (query i sees i-16..i)
};

template <typename T>
class CudnnAttention : public testing::Test {};
using Types = testing::Types<__nv_bfloat16, __half>;
TYPED_TEST_SUITE(CudnnAttention, Types, kc::testing::StorageNames);

TYPED_TEST(CudnnAttention, MatchesTheCpuFlashAttention) {
  REQUIRE_GPU();
  for (const Case& c : kCases) {
    SCOPED_TRACE(testing::Message() << "S=" << c.shape.S << " B=" << c.shape.B << " H=" << c.shape.H
                                    << " G=" << c.shape.G << " Dh=" << c.shape.Dh
                                    << " causal=" << c.causal << " window=" << c.window);
    check_against_cpu<TypeParam>(c);
  }
}

TEST(CudnnAttentionShapes, TheBenchmarkShapesBuild) {
  REQUIRE_GPU();
  // GPT-2 124M and GPT 1.3B as tools/gpu_check.sh trains them (bf16, causal).
  for (const AttentionShape& s :
       {AttentionShape{1024, 8, 12, 12, 64}, AttentionShape{2048, 4, 16, 16, 128}}) {
    const mc::CudnnAttentionSupport support =
        mc::cudnn_attention_support(s, options_of({s, true, 0}), DType::BF16);
    EXPECT_TRUE(support.supported) << "S=" << s.S << " Dh=" << s.Dh << ": " << support.reason
                                   << " (cuDNN " << mc::cudnn_attention_runtime_version() << ")";
  }
}

TEST(CudnnAttentionShapes, RefusesWhatItIsNotHanded) {
  // Host-only: these are refused before any graph is built.
  const AttentionShape s{128, 1, 4, 4, 64};
  auto refusal = [&](AttentionOptions opt, DType dtype, const AttentionShape& shape) {
    const mc::CudnnAttentionSupport support = mc::cudnn_attention_support(shape, opt, dtype);
    EXPECT_FALSE(support.supported);
    return support.reason;
  };
  const AttentionOptions base = options_of({s, true, 0});
  if (mc::cudnn_attention_runtime_version() == 0) {
    const std::string reason = refusal(base, DType::BF16, s);
    EXPECT_NE(reason.find("cuDNN frontend"), std::string::npos) << reason;
    GTEST_SKIP() << "built without the cuDNN frontend: " << reason;
  }
  AttentionOptions dropout = base;
  dropout.dropout_p = 0.1f;
  EXPECT_NE(refusal(dropout, DType::BF16, s).find("dropout"), std::string::npos);
  const uint8_t mask[1] = {1};
  AttentionOptions masked = base;
  masked.key_mask = mask;
  EXPECT_NE(refusal(masked, DType::BF16, s).find("key mask"), std::string::npos);
  EXPECT_NE(refusal(base, DType::F32, s).find("bf16 or fp16"), std::string::npos);
  EXPECT_NE(refusal(base, DType::BF16, AttentionShape{128, 1, 4, 4, 36}).find("head dim 36"),
            std::string::npos);
}

#endif  // MEGATRON_WITH_CUDA

}  // namespace
