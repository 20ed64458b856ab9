// Attention through both backends (ops::attention_* and ops::flash_attention_*), as in
// test_ops_backends.cpp: the same case runs on CPU tensors (fp32) and on CUDA tensors (fp32, bf16,
// fp16), compared by norm-relative error with per-dtype tolerances: GQA, causal, key masks,
// dropout, sequence offsets and soft-capped scores (flash); flash attention also against the
// unfused CUDA path on the GPU.
// Without a CUDA build or a GPU these cases compute the CPU side, then report SKIPPED.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "megatron/backend/ops.h"
#include "megatron/core/tensor.h"
#include "tests/support/ops_test_util.h"

namespace megatron {
namespace {

using ops::testing::Backend;
using ops::testing::CudaVsCpuOps;
using ops::testing::dtype_param_name;
using ops::testing::Outputs;
using ops::testing::rel_error;
using ops::testing::tolerance;
using ops::testing::values;

struct AttentionCase {
  kernels::AttentionShape shape;
  bool causal, key_mask;
  float dropout;
  bool packed = false;   // segment_ids: documents of 7 + 5b tokens in sample b
  int64_t window = 0;    // sliding window (causal cases)
  float softcap = 0.0f;  // soft-capped scores (Gemma 2; flash only)
};

// Packed documents: [B, S] segment ids, sample b cut every 7 + 5b tokens.
std::vector<int32_t> segment_ids(const kernels::AttentionShape& s) {
  std::vector<int32_t> ids(s.B * s.S);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t j = 0; j < s.S; ++j) ids[b * s.S + j] = static_cast<int32_t>(j / (7 + 5 * b));
  return ids;
}

class CudaVsCpuAttention : public CudaVsCpuOps {
 protected:
  void run_attention(const AttentionCase& c) {
    const kernels::AttentionShape& s = c.shape;
    const int64_t n_qkv = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
    const auto qkv = rnd(n_qkv, 51), dout = rnd(n_out, 52);
    std::vector<uint8_t> mask(s.B * s.S, 1);
    for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
    for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // 1: a prefix
    compare(
        [&](const Backend& be) {
          Tensor tmask = be.bytes(mask);  // on the run's device, as the kernels need
          Tensor tseg = be.ints(segment_ids(s));
          kernels::AttentionOptions opt;
          opt.segment_ids = c.packed ? tseg.data<int32_t>() : nullptr;
          opt.scale = 1.0f / std::sqrt(float(s.Dh));
          opt.causal = c.causal;
          opt.key_mask = c.key_mask ? static_cast<const uint8_t*>(tmask.raw()) : nullptr;
          opt.dropout_p = c.dropout;
          opt.window = c.window;
          opt.seed = 99;
          opt.stream = 5;
          Tensor tqkv = be.make(qkv, {s.S, s.B, s.G, s.H / s.G + 2, s.Dh});
          Tensor out = be.act_zeros({s.S, s.B, s.H, s.Dh});
          Tensor probs = be.zeros({s.B, s.H, s.S, s.S}, DType::F32);
          ops::attention_forward(s, opt, tqkv, out, probs);
          Tensor dqkv = be.act_zeros({n_qkv});
          ops::attention_backward(s, opt, tqkv, probs, be.make(dout, {n_out}), dqkv);
          return Outputs{{"out", out}, {"probs", probs}, {"dqkv", dqkv}};
        },
        // Backward chains several roundings to T (dropped probs, dS); probs are fp32 softmaxes of
        // fp32 scores of the same (rounded) inputs, whatever T.
        {{"dqkv", 3.0}}, {{"probs", 1e-4}});
  }
};

TEST_P(CudaVsCpuAttention, CausalGqaMaskDropoutOffsets) {
  run_attention({{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f});
}
TEST_P(CudaVsCpuAttention, PackedDocumentsWithHolesAndDropout) {
  run_attention({{37, 2, 4, 2, 16}, true, true, 0.1f, true});
}
TEST_P(CudaVsCpuAttention, PlainMultiHead) { run_attention({{37, 2, 4, 4, 16}, false, false, 0}); }
TEST_P(CudaVsCpuAttention, MultiQueryPaddedDropout) {
  run_attention({{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f});
}

// Flash attention (ops::flash_attention_*): CUDA flash in dt() against CPU flash in fp32, and on
// the GPU against the unfused CUDA path of the same dtype (same dropout masks).
class CudaVsCpuFlashAttention : public CudaVsCpuOps {
 protected:
  void run_flash(const AttentionCase& c) {
    const kernels::AttentionShape& s = c.shape;
    const int64_t n_qkv = s.S * s.B * s.G * (s.H / s.G + 2) * s.Dh, n_out = s.S * s.B * s.H * s.Dh;
    const auto qkv = rnd(n_qkv, 61), dout = rnd(n_out, 62);
    std::vector<uint8_t> mask(s.B * s.S, 1);
    for (int64_t j = 0; j < s.S; j += 3) mask[j] = 0;                            // sample 0: holes
    for (int64_t j = 0; j < s.S && s.B > 1; ++j) mask[s.S + j] = j < 2 ? 0 : 1;  // 1: a prefix
    compare(
        [&](const Backend& be) {
          Tensor tmask = be.bytes(mask);
          Tensor tseg = be.ints(segment_ids(s));
          kernels::AttentionOptions opt;
          opt.segment_ids = c.packed ? tseg.data<int32_t>() : nullptr;
          opt.scale = 1.0f / std::sqrt(float(s.Dh));
          opt.causal = c.causal;
          opt.key_mask = c.key_mask ? static_cast<const uint8_t*>(tmask.raw()) : nullptr;
          opt.dropout_p = c.dropout;
          opt.window = c.window;
          opt.softcap = c.softcap;
          opt.seed = 99;
          opt.stream = 5;
          Tensor tqkv = be.make(qkv, {s.S, s.B, s.G, s.H / s.G + 2, s.Dh});
          Tensor tdout = be.make(dout, {n_out});
          Tensor out = be.act_zeros({s.S, s.B, s.H, s.Dh});
          Tensor lse = be.zeros({s.B, s.H, s.S}, DType::F32);
          ops::flash_attention_forward(s, opt, tqkv, out, lse);
          Tensor dqkv = be.act_zeros({n_qkv});
          ops::flash_attention_backward(s, opt, tqkv, out, lse, tdout, dqkv);
          // Rows with no visible key have lse = -inf on both sides: compare the finite part.
          std::vector<float> l = values(lse);
          for (float& x : l)
            if (std::isinf(x)) x = 0.0f;
          if (be.device == Device::CUDA && c.softcap == 0.0f) {  // unfused has no soft-capping
            Tensor uout = be.act_zeros({s.S, s.B, s.H, s.Dh});
            Tensor probs = be.zeros({s.B, s.H, s.S, s.S}, DType::F32);
            ops::attention_forward(s, opt, tqkv, uout, probs);
            Tensor udqkv = be.act_zeros({n_qkv});
            ops::attention_backward(s, opt, tqkv, probs, tdout, udqkv);
            EXPECT_LE(rel_error(values(out), values(uout)), 2 * tolerance(be.dtype))
                << "flash vs unfused out on CUDA";
            EXPECT_LE(rel_error(values(dqkv), values(udqkv)), 6 * tolerance(be.dtype))
                << "flash vs unfused dqkv on CUDA";
          }
          return Outputs{{"out", out}, {"lse", be.f32(l, {s.B, s.H, s.S})}, {"dqkv", dqkv}};
        },
        {{"dqkv", 3.0}}, {{"lse", 1e-4}});
  }
};

TEST_P(CudaVsCpuFlashAttention, CausalGqaMaskDropoutOffsets) {
  run_flash({{37, 2, 4, 2, 16, 1, 6, 3}, true, true, 0.2f});
}
TEST_P(CudaVsCpuFlashAttention, PlainMultiHeadCrossesTiles) {
  run_flash({{70, 2, 4, 4, 32}, false, false, 0});
}
TEST_P(CudaVsCpuFlashAttention, MultiQueryPaddedDropoutDh64) {
  run_flash({{19, 2, 2, 1, 64, 0, 0, 0}, false, true, 0.1f});
}
TEST_P(CudaVsCpuFlashAttention, PackedDocumentsCrossTiles) {
  run_flash({{70, 2, 4, 2, 32}, true, true, 0.1f, true});
}
TEST_P(CudaVsCpuFlashAttention, CausalDh128) { run_flash({{45, 1, 2, 2, 128}, true, false, 0}); }
TEST_P(CudaVsCpuFlashAttention, CausalPaddedDh256) {
  run_flash({{33, 1, 2, 1, 256}, true, true, 0.1f});
}
TEST_P(CudaVsCpuFlashAttention, OddHeadDim) { run_flash({{41, 2, 3, 3, 40}, true, true, 0}); }
// Without dropout, bf16/fp16 with head dims that are multiples of 16 run on the tensor cores
// (kernels/cuda/flash_attention_tc.h): 64 x 64 tiles, so these cross several tiles with partial
// last ones, GQA, key masks with holes, packed documents and a sliding window.
TEST_P(CudaVsCpuFlashAttention, TensorCoresCausalGqaKeyHolesDh64) {
  run_flash({{150, 2, 4, 2, 64, 2, 8, 1}, true, true, 0});
}
TEST_P(CudaVsCpuFlashAttention, TensorCoresBidirectionalMaskedDh16) {
  run_flash({{130, 2, 2, 1, 16}, false, true, 0});
}
TEST_P(CudaVsCpuFlashAttention, TensorCoresPackedDocumentsWindowDh128) {
  run_flash({{200, 1, 2, 2, 128}, true, false, 0, true, 50});
}
TEST_P(CudaVsCpuFlashAttention, TensorCoresLongCausalDh128) {
  run_flash({{300, 1, 2, 2, 128}, true, false, 0});
}

// Soft-capped scores (Gemma 2) run in the block kernels on CUDA (kernels/cuda/flash_block.h):
// across tiles with GQA, key holes, dropout and a window; and a shape that would otherwise go to
// cuDNN or the tensor cores (Dh 64, no dropout), which have no soft-capping.
TEST_P(CudaVsCpuFlashAttention, SoftcapCausalGqaMaskDropoutWindow) {
  run_flash({{70, 2, 4, 2, 32, 1, 6, 3}, true, true, 0.1f, false, 40, 2.0f});
}
TEST_P(CudaVsCpuFlashAttention, SoftcapTensorCoreShapePackedDocuments) {
  run_flash({{150, 2, 4, 2, 64}, true, false, 0, true, 0, 1.0f});
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuAttention,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuFlashAttention,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);

}  // namespace
}  // namespace megatron
