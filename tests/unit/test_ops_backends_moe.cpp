// The mixture-of-experts ops of megatron/backend/ops.h (gather_rows, scatter_rows, moe_combine,
// moe_combine_backward) through both backends, as test_ops_backends.cpp: the same code on CPU
// tensors (fp32, then the tested dtype through the 16-bit contract) and, with a GPU, on CUDA
// tensors, every output compared with the fp32 CPU one (the moves exactly). Without a CUDA build
// or a GPU the CPU sides run and the cases report SKIPPED. The argument checks run everywhere.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
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
using ops::testing::randn;
using ops::testing::values;
using ::testing::HasSubstr;

// n indices into [0, rows), every fourth or so -1.
std::vector<int32_t> some_rows(int64_t n, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& i : v) i = rng() % 4 == 0 ? -1 : static_cast<int32_t>(rng() % rows);
  return v;
}

class CudaVsCpuMoeOps : public CudaVsCpuOps {};

TEST_P(CudaVsCpuMoeOps, GatherAndScatterMoveRowsExactly) {
  const int64_t n = 37, m = 53, D = 24;
  const auto src = rnd(n * D, 1), base = rnd((m + 5) * D, 2);
  const auto idx = some_rows(m, n, 3);
  std::vector<int32_t> targets(static_cast<size_t>(n));  // injective into m + 5 rows
  for (int64_t i = 0; i < n; ++i) targets[i] = i % 6 == 5 ? -1 : static_cast<int32_t>((i * 7) % 58);
  compare(
      [&](const Backend& be) {
        Tensor tsrc = be.make(src, {n, D}), gathered = be.act_zeros({m, D});
        ops::gather_rows(tsrc, be.ints(idx), gathered);
        Tensor scattered = be.make(base, {m + 5, D});
        ops::scatter_rows(tsrc, be.ints(targets), scattered);
        // fp32 rows of any activation dtype move the same way (the dispatcher's fp32 paths).
        Tensor src32 = be.f32(src, {n, D}), gathered32 = be.zeros({m, D}, DType::F32);
        ops::gather_rows(src32, be.ints(idx), gathered32);
        return Outputs{
            {"gathered", gathered}, {"scattered", scattered}, {"gathered32", gathered32}};
      },
      {}, {{"gathered", 0.0}, {"scattered", 0.0}, {"gathered32", 0.0}});
}

TEST_P(CudaVsCpuMoeOps, Combine) {
  const int64_t T = 29, k = 3, D = 40, R = 61;
  const auto rows = rnd(R * D, 4), slot_rows = rnd(T * k * D, 5);
  auto gates = randn(T * k, 6);
  for (float& g : gates) g = std::abs(g);
  gates[4] = 0.0f;  // a dropped slot
  const auto idx = some_rows(T * k, R, 7);
  compare(
      [&](const Backend& be) {
        Tensor trows = be.make(rows, {R, D}), tslots = be.make(slot_rows, {T * k, D});
        Tensor tg = be.f32(gates, {T * k}), ti = be.ints(idx);
        Tensor out = be.act_zeros({T, D}), out32 = be.zeros({T, D}, DType::F32);
        Tensor sum32 = be.zeros({T, D}, DType::F32), slots32 = be.zeros({T, D}, DType::F32);
        ops::moe_combine(tslots, nullptr, &tg, k, out);    // the layer's forward
        ops::moe_combine(tslots, nullptr, &tg, k, out32);  // ... into fp32
        ops::moe_combine(trows, &ti, nullptr, k, sum32);   // the dispatcher's backward
        ops::moe_combine(trows, &ti, &tg, k, slots32);     // both
        return Outputs{{"out", out}, {"out32", out32}, {"sum32", sum32}, {"indexed", slots32}};
      },
      {{"out", 2.0}});
}

TEST_P(CudaVsCpuMoeOps, CombineBackward) {
  const int64_t T = 23, k = 2, D = 72;
  const auto rows = rnd(T * k * D, 8), dy = rnd(T * D, 9);
  auto gates = randn(T * k, 10);
  for (float& g : gates) g = std::abs(g);
  compare([&](const Backend& be) {
    Tensor trows = be.make(rows, {T * k, D}), tdy = be.make(dy, {T, D});
    Tensor tg = be.f32(gates, {T * k});
    Tensor d_rows = be.act_zeros({T * k, D}), d_gates = be.zeros({T * k}, DType::F32);
    ops::moe_combine_backward(trows, tg, tdy, k, d_rows, d_gates);
    return Outputs{{"d_rows", d_rows}, {"d_gates", d_gates}};
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaVsCpuMoeOps,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16), dtype_param_name);

// ---- argument checks (every device) ----------------------------------------------------------

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MoeOps, ArgumentsAreChecked) {
  Tensor src = Tensor::zeros({4, 3}, DType::F32), out = Tensor::zeros({2, 3}, DType::F32);
  Tensor idx = Tensor::zeros({2}, DType::I32), idx64 = Tensor::zeros({2}, DType::I64);
  EXPECT_THAT(error_of([&] { ops::gather_rows(src, idx64, out); }),
              HasSubstr("gather_rows: index must be int32"));
  Tensor out16 = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::gather_rows(src, idx, out16); }), HasSubstr("gather_rows: out"));
  Tensor wide = Tensor::zeros({2, 4}, DType::F32);
  EXPECT_THAT(error_of([&] { ops::scatter_rows(src, idx, wide); }), HasSubstr("scatter_rows: src"));
  Tensor bad = Tensor::zeros({2}, DType::I32);
  bad.data<int32_t>()[1] = 4;
  EXPECT_THAT(error_of([&] { ops::gather_rows(src, bad, out); }),
              HasSubstr("gather_rows: index 4 at 1 outside [0, 4)"));

  Tensor rows = Tensor::zeros({4, 3}, DType::F32), y = Tensor::zeros({2, 3}, DType::F32);
  Tensor gates = Tensor::zeros({4}, DType::F32), gates16 = Tensor::zeros({4}, DType::BF16);
  EXPECT_THAT(error_of([&] { ops::moe_combine(rows, nullptr, &gates16, 2, y); }),
              HasSubstr("gates must be fp32"));
  EXPECT_THAT(error_of([&] { ops::moe_combine(rows, nullptr, &gates, 3, y); }),
              HasSubstr("moe_combine: 4 rows for 2 tokens x 3 slots"));
  Tensor y16 = Tensor::zeros({2, 3}, DType::F16);  // fp32 rows: out fp32 only
  EXPECT_THAT(error_of([&] { ops::moe_combine(rows, nullptr, &gates, 2, y16); }),
              HasSubstr("moe_combine"));
  Tensor d_rows = Tensor::zeros({4, 3}, DType::F32), d_gates = Tensor::zeros({3}, DType::F32);
  EXPECT_THAT(error_of([&] { ops::moe_combine_backward(rows, gates, y, 2, d_rows, d_gates); }),
              HasSubstr("moe_combine_backward: rows"));
  // Nothing to move is fine everywhere.
  Tensor none = Tensor::zeros({0}, DType::I32), empty = Tensor::zeros({0, 3}, DType::F32);
  ops::gather_rows(src, none, empty);
  ops::scatter_rows(empty, none, out);
  ops::gather_rows(empty, none, empty);
}

// 16-bit rows gathered on the CPU keep their bits (no widening for a move).
TEST(MoeOps, MovesKeep16BitRowsBitForBit) {
  for (DType t : {DType::BF16, DType::F16}) {
    Tensor src = Tensor::empty({3, 5}, t);
    auto* bits = static_cast<uint16_t*>(src.raw());
    for (int i = 0; i < 15; ++i) bits[i] = static_cast<uint16_t>(0x7c01 + 977 * i);  // NaNs too
    Tensor idx = Tensor::empty({4}, DType::I32), out = Tensor::empty({4, 5}, t);
    const int32_t order[4] = {2, -1, 0, 2};
    std::copy(order, order + 4, idx.data<int32_t>());
    ops::gather_rows(src, idx, out);
    const auto* got = static_cast<const uint16_t*>(out.raw());
    for (int r = 0; r < 4; ++r)
      for (int d = 0; d < 5; ++d)
        EXPECT_EQ(got[r * 5 + d], order[r] < 0 ? 0 : bits[order[r] * 5 + d]) << dtype_name(t);
  }
}

}  // namespace
}  // namespace megatron
