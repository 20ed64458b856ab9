// The 16-bit CPU paths of ops:: against the contract of backend/float_args.h: a bf16/fp16 op
// reads its 16-bit inputs, computes in fp32 and rounds each output once. Elementwise ops, norms
// and embeddings run kernels templated on the storage type for bf16 (widened in registers) and
// fp32 copies for fp16; both must give, bit for bit, the fp32 op on the widened inputs rounded
// once (norms: within one unit in the last place, their row sums may be vectorized in another
// order). Linear layers without native 16-bit GEMMs (fp16 everywhere; bf16 on a CPU without bf16
// instructions) widen a block of rows at a time: checked over several blocks against the fp32
// op on the widened values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "megatron/backend/ops.h"
#include "megatron/core/tensor.h"
#include "tests/support/ops_test_util.h"

namespace megatron {
namespace {

using ops::testing::dtype_param_name;
using ops::testing::host_tensor;
using ops::testing::randn;
using ops::testing::values;

class Cpu16BitOps : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  // A 16-bit tensor of random values and its exact fp32 widening.
  std::pair<Tensor, Tensor> pair(const Shape& shape, uint32_t seed, float sd = 1.0f) const {
    Tensor t16 = host_tensor(randn(static_cast<size_t>(shape.numel()), seed, sd), shape, dt());
    Tensor t32 = Tensor::empty(shape, DType::F32);
    ops::cast(t16, t32);
    return {t16, t32};
  }
  Tensor zeros16(const Shape& s) const { return Tensor::zeros(s, dt()); }
  // `out16` must equal `out32` rounded to the 16-bit type, bit for bit.
  void expect_rounded_equal(const Tensor& out16, const Tensor& out32, const std::string& what) {
    Tensor rounded = Tensor::empty(out32.shape(), dt());
    ops::cast(out32, rounded);
    ASSERT_EQ(out16.numel(), rounded.numel()) << what;
    const auto* a = static_cast<const uint16_t*>(out16.raw());
    const auto* b = static_cast<const uint16_t*>(rounded.raw());
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < out16.numel(); ++i)
      if (a[i] != b[i] && differ++ == 0) first = i;
    EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << out16.numel()
                         << " elements differ, first at " << first;
  }
  // The same within one unit in the last place: for ops with sums over a row, whose vectorized
  // order may differ between the bf16 and the fp32 kernel (fp32 round-off, then the rounding).
  void expect_rounded_within_one_ulp(const Tensor& out16, const Tensor& out32,
                                     const std::string& what) {
    Tensor rounded = Tensor::empty(out32.shape(), dt());
    ops::cast(out32, rounded);
    const auto* a = static_cast<const uint16_t*>(out16.raw());
    const auto* b = static_cast<const uint16_t*>(rounded.raw());
    int64_t beyond = 0;
    for (int64_t i = 0; i < out16.numel(); ++i)
      beyond += std::abs(static_cast<int>(a[i]) - static_cast<int>(b[i])) > 1;
    EXPECT_EQ(beyond, 0) << what << ": " << beyond << " elements more than one ulp apart";
  }
  static void expect_fp32_equal(const Tensor& a, const Tensor& b, const std::string& what) {
    EXPECT_EQ(values(a), values(b)) << what;
  }
  static void expect_fp32_close(const Tensor& a, const Tensor& b, const std::string& what,
                                double tolerance = 1e-6) {
    EXPECT_LT(ops::testing::rel_error(values(a), values(b)), tolerance) << what;
  }
};

TEST_P(Cpu16BitOps, ElementwiseEqualTheWidenedFp32OpsRoundedOnce) {
  const Shape s{37, 129};  // odd sizes: vector tails
  const auto [a16, a32] = pair(s, 1);
  const auto [b16, b32] = pair(s, 2);
  Tensor o16 = zeros16(s), o32 = Tensor::zeros(s, DType::F32);
  ops::add(a16, b16, o16);
  ops::add(a32, b32, o32);
  expect_rounded_equal(o16, o32, "add");

  for (const math::Gelu kind : {math::Gelu::Tanh, math::Gelu::Erf}) {
    const std::string name = kind == math::Gelu::Tanh ? "gelu tanh" : "gelu erf";
    ops::gelu_forward(a16, o16, kind);
    ops::gelu_forward(a32, o32, kind);
    expect_rounded_equal(o16, o32, name + " forward");
    ops::gelu_backward(a16, b16, o16, kind);
    ops::gelu_backward(a32, b32, o32, kind);
    expect_rounded_equal(o16, o32, name + " backward");
  }

  const Shape half{37, 64}, full{37, 128};
  const auto [x16, x32] = pair(full, 3);
  const auto [dy16, dy32] = pair(half, 4);
  Tensor y16 = zeros16(half), y32 = Tensor::zeros(half, DType::F32);
  ops::glu_forward(x16, y16);
  ops::glu_forward(x32, y32);
  expect_rounded_equal(y16, y32, "swiglu forward");
  Tensor dx16 = zeros16(full), dx32 = Tensor::zeros(full, DType::F32);
  ops::glu_backward(x16, dy16, dx16);
  ops::glu_backward(x32, dy32, dx32);
  expect_rounded_equal(dx16, dx32, "swiglu backward");

  // In place: a 16-bit accumulator, an fp32 one (a gradient summed in fp32), a bias.
  Tensor acc16 = a16.clone(), acc32 = a32.clone();
  ops::add_inplace(acc16, b16);
  ops::add_inplace(acc32, b32);
  expect_rounded_equal(acc16, acc32, "add_inplace");
  Tensor fp32_acc = a32.clone(), fp32_ref = a32.clone();
  ops::add_inplace(fp32_acc, b16);
  ops::add_inplace(fp32_ref, b32);
  expect_fp32_equal(fp32_acc, fp32_ref, "add_inplace into fp32");
  const auto [bias16, bias32] = pair({129}, 5);
  Tensor yb16 = a16.clone(), yb32 = a32.clone();
  ops::add_bias(yb16, bias16);
  ops::add_bias(yb32, bias32);
  expect_rounded_equal(yb16, yb32, "add_bias");
}

TEST_P(Cpu16BitOps, ScaleInPlaceRoundsOnce) {
  const auto [x16, x32] = pair({1000}, 6);
  Tensor a = x16.clone(), b = x32.clone();
  ops::scale_inplace(a, 0.123f);
  ops::scale_inplace(b, 0.123f);
  expect_rounded_equal(a, b, "scale_inplace");
}

TEST_P(Cpu16BitOps, NormsMatchTheWidenedFp32OpsRoundedOnce) {
  const int64_t rows = 45, D = 200;
  const auto [x16, x32] = pair({rows, D}, 7, 2.0f);
  const auto [dy16, dy32] = pair({rows, D}, 8);
  for (const bool fp32_weights : {false, true}) {
    const std::string tag = fp32_weights ? " (fp32 weights)" : " (16-bit weights)";
    auto [w16, w32] = pair({D}, 9, 0.5f);
    auto [b16, b32] = pair({D}, 10, 0.5f);
    const Tensor& w = fp32_weights ? w32 : w16;
    const Tensor& b = fp32_weights ? b32 : b16;
    Tensor y16 = zeros16({rows, D}), y32 = Tensor::zeros({rows, D}, DType::F32);
    Tensor m16 = Tensor::zeros({rows}, DType::F32), m32 = m16.clone();
    Tensor r16 = Tensor::zeros({rows}, DType::F32), r32 = r16.clone();
    ops::layernorm_forward(x16, w, b, 1e-5f, y16, m16, r16);
    ops::layernorm_forward(x32, w32, b32, 1e-5f, y32, m32, r32);
    expect_rounded_within_one_ulp(y16, y32, "layernorm forward" + tag);
    expect_fp32_close(r16, r32, "layernorm rstd" + tag);
    Tensor dx16 = zeros16({rows, D}), dx32 = Tensor::zeros({rows, D}, DType::F32);
    Tensor dw16 = Tensor::zeros({D}, DType::F32), dw32 = dw16.clone();
    Tensor db16 = Tensor::zeros({D}, DType::F32), db32 = db16.clone();
    ops::layernorm_backward(x16, w, m16, r16, dy16, dx16, dw16, db16);
    ops::layernorm_backward(x32, w32, m32, r32, dy32, dx32, dw32, db32);
    expect_rounded_within_one_ulp(dx16, dx32, "layernorm dx" + tag);
    expect_fp32_close(dw16, dw32, "layernorm dweight" + tag);
    expect_fp32_close(db16, db32, "layernorm dbias" + tag);

    ops::rmsnorm_forward(x16, w, 1e-6f, y16, r16);
    ops::rmsnorm_forward(x32, w32, 1e-6f, y32, r32);
    expect_rounded_within_one_ulp(y16, y32, "rmsnorm forward" + tag);
    ops::rmsnorm_backward(x16, w, r16, dy16, dx16, dw16);
    ops::rmsnorm_backward(x32, w32, r32, dy32, dx32, dw32);
    expect_rounded_within_one_ulp(dx16, dx32, "rmsnorm dx" + tag);
    expect_fp32_close(dw16, dw32, "rmsnorm dweight" + tag);
  }
}

TEST_P(Cpu16BitOps, EmbeddingCopiesRowsAndSumsGradientsInFp32) {
  const int64_t vocab = 50, dim = 24, tokens = 40, start = 10;
  const auto [t16, t32] = pair({vocab, dim}, 11);
  Tensor ids = Tensor::empty({tokens}, DType::I32);
  for (int64_t i = 0; i < tokens; ++i)
    ids.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 70);  // some outside the shard
  Tensor o16 = zeros16({tokens, dim}), o32 = Tensor::zeros({tokens, dim}, DType::F32);
  ops::embedding_forward(ids, t16, start, o16);
  ops::embedding_forward(ids, t32, start, o32);
  expect_rounded_equal(o16, o32, "embedding forward");
  const auto [d16, d32] = pair({tokens, dim}, 12);
  Tensor g16 = Tensor::zeros({vocab, dim}, DType::F32), g32 = g16.clone();
  ops::embedding_backward(ids, d16, start, g16);
  ops::embedding_backward(ids, d32, start, g32);
  expect_fp32_equal(g16, g32, "embedding backward");
}

// Several row blocks (and a short last one): every output against the fp32 linear layer on the
// widened values. The GEMMs may split their sums differently for a block than for the whole
// matrix, so the comparison allows fp32 round-off: 16-bit outputs within one unit in the last
// place of the rounded fp32 result, fp32 gradients within 1e-5 relative.
TEST_P(Cpu16BitOps, LinearMatchesTheWidenedFp32LayerOverRowBlocks) {
  const int64_t n = 2200, in = 1024, out = 1024;
  ASSERT_LT(kernels::cpu::widened_gemm_block_rows(n, in, out), n / 2) << "want >= 3 blocks";
  const auto [x16, x32] = pair({n, in}, 13);
  const auto [w16, w32] = pair({out, in}, 14, 0.03f);
  const auto [b16, b32] = pair({out}, 15);
  const auto [dy16, dy32] = pair({n, out}, 16);
  const double ulp = dt() == DType::BF16 ? 1.0 / 128 : 1.0 / 1024;
  // One ulp of the element, plus fp32 round-off of the whole output (elements near zero are
  // differences of large products).
  auto expect_close_16 = [&](const Tensor& t16, const Tensor& t32, const char* what) {
    const std::vector<float> a = values(t16), b = values(t32);
    float largest = 0;
    for (const float v : b) largest = std::max(largest, std::abs(v));
    int64_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i)
      bad += std::abs(a[i] - b[i]) > ulp * std::abs(b[i]) + 1e-5 * largest;
    EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << a.size() << " beyond one ulp";
  };
  auto expect_close_32 = [](const Tensor& t, const Tensor& ref, const char* what) {
    EXPECT_LT(ops::testing::rel_error(values(t), values(ref)), 1e-5) << what;
  };
  Tensor y16 = zeros16({n, out}), y32 = Tensor::zeros({n, out}, DType::F32);
  ops::linear_forward(x16, w16, &b16, y16);
  ops::linear_forward(x32, w32, &b32, y32);
  expect_close_16(y16, y32, "y");

  const auto dw0 = randn(static_cast<size_t>(out * in), 17);  // accumulated into
  Tensor dw16 = host_tensor(dw0, {out, in}, DType::F32), dw32 = dw16.clone();
  Tensor db16 = Tensor::zeros({out}, DType::F32), db32 = db16.clone();
  Tensor dx16 = zeros16({n, in}), dx32 = Tensor::zeros({n, in}, DType::F32);
  ops::linear_backward(x16, w16, dy16, &dx16, &dw16, &db16);
  ops::linear_backward(x32, w32, dy32, &dx32, &dw32, &db32);
  expect_close_16(dx16, dx32, "dx");
  expect_close_32(dw16, dw32, "dw");
  expect_close_32(db16, db32, "db");

  // A 16-bit weight gradient: accumulated in fp32 over every block, rounded once at the end.
  Tensor dwh = zeros16({out, in}), dwh32 = Tensor::zeros({out, in}, DType::F32);
  ops::linear_backward(x16, w16, dy16, nullptr, &dwh, nullptr);
  ops::linear_backward(x32, w32, dy32, nullptr, &dwh32, nullptr);
  expect_close_16(dwh, dwh32, "16-bit dw");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Cpu16BitOps, ::testing::Values(DType::BF16, DType::F16),
                         dtype_param_name);

}  // namespace
}  // namespace megatron
