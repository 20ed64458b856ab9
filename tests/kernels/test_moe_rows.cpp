// The MoE row kernels (kernels/cpu/moe_rows.h) against their naive references: gathers and
// scatters move rows bit for bit (any row size, -1 rows), the gated sums match the fp64
// reference and add each token's slots in slot order (bit-identical to that loop in fp32), the
// backward is the exact adjoint of the forward and matches finite differences, and every result
// is the same for any thread count. Bad indices are errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/moe_rows.h"
#include "kernels/cpu/reference/moe_rows.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

// n indices into [0, rows), about a quarter of them -1.
std::vector<int32_t> random_index(int64_t n, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (auto& i : idx) i = rng() % 4 == 0 || rows == 0 ? -1 : static_cast<int32_t>(rng() % rows);
  return idx;
}

// A random injective map of n sources into [0, rows) (rows >= n), some sources -1.
std::vector<int32_t> random_targets(int64_t n, int64_t rows, uint32_t seed) {
  std::vector<int32_t> perm(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::mt19937 rng(seed);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> idx(perm.begin(), perm.begin() + n);
  for (auto& i : idx)
    if (rng() % 5 == 0) i = -1;
  return idx;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

struct MoveCase {
  int64_t src_rows, n;
  size_t row_bytes;
};
const MoveCase kMoves[] = {{1, 1, 4},        {7, 13, 2}, {33, 40, 6}, {64, 64, 512},
                           {300, 900, 1024}, {5, 0, 8},  {0, 3, 4}};

TEST(MoeRows, GatherMatchesReferenceBitForBit) {
  for (const MoveCase& c : kMoves) {
    const auto src = random_bytes(c.src_rows * c.row_bytes, 1);
    const auto idx = random_index(c.n, c.src_rows, uint32_t(c.n) + 2);
    std::vector<uint8_t> out(c.n * c.row_bytes, 0xAB), want(out.size(), 0xCD);
    cpu::gather_rows(src.data(), c.src_rows, idx.data(), c.n, c.row_bytes, out.data());
    ref::gather_rows(src.data(), idx.data(), c.n, c.row_bytes, want.data());
    EXPECT_EQ(out, want) << c.n << " rows of " << c.row_bytes << " bytes";
  }
}

TEST(MoeRows, ScatterMatchesReferenceAndKeepsTheOtherRows) {
  for (const MoveCase& c : kMoves) {
    const int64_t out_rows = c.n + c.src_rows;
    const auto src = random_bytes(c.n * c.row_bytes, 3);
    const auto idx = random_targets(c.n, out_rows, uint32_t(c.n) + 4);
    auto out = random_bytes(out_rows * c.row_bytes, 5), want = out;
    cpu::scatter_rows(src.data(), idx.data(), c.n, out_rows, c.row_bytes, out.data());
    ref::scatter_rows(src.data(), idx.data(), c.n, c.row_bytes, want.data());
    EXPECT_EQ(out, want) << c.n << " rows of " << c.row_bytes << " bytes";
  }
}

TEST(MoeRows, ScatterUndoesTheGatherOfAPermutation) {
  const int64_t n = 257, row_bytes = 12;
  const auto src = random_bytes(n * row_bytes, 6);
  std::vector<int32_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = static_cast<int32_t>((i * 97 + 5) % n);
  std::vector<uint8_t> gathered(src.size()), back(src.size());
  cpu::gather_rows(src.data(), n, perm.data(), n, row_bytes, gathered.data());
  cpu::scatter_rows(gathered.data(), perm.data(), n, n, row_bytes, back.data());
  EXPECT_EQ(back, src);
}

TEST(MoeRows, BadIndicesAreErrors) {
  const std::vector<float> src(8, 1.0f);
  std::vector<float> out(8, 0.0f);
  for (int32_t bad : {-2, 4, 1000}) {
    const std::vector<int32_t> idx{0, bad};
    EXPECT_THROW(cpu::gather_rows(src.data(), 4, idx.data(), 2, 8, out.data()), Error) << bad;
    EXPECT_THROW(cpu::scatter_rows(src.data(), idx.data(), 2, 4, 8, out.data()), Error) << bad;
    EXPECT_THROW(cpu::moe_combine(src.data(), 4, idx.data(), nullptr, 1, 2, 2, out.data()), Error)
        << bad;
  }
  const std::vector<int32_t> twice{3, -1, 3};
  EXPECT_THROW(cpu::scatter_rows(src.data(), twice.data(), 3, 4, 4, out.data()), Error);
  // Without an index the rows must be the tokens' slots.
  EXPECT_THROW(cpu::moe_combine(src.data(), 3, nullptr, nullptr, 1, 2, 2, out.data()), Error);
}

struct SumCase {
  int64_t tokens, topk, dim, rows;  // rows: of the indexed form
};
const SumCase kSums[] = {{1, 1, 1, 1},      {5, 2, 7, 9}, {17, 3, 33, 40}, {64, 2, 256, 90},
                         {100, 4, 65, 300}, {0, 2, 8, 3}, {9, 6, 16, 20},  {400, 2, 128, 700}};

TEST(MoeRows, CombineMatchesReferenceWithAndWithoutIndexAndGates) {
  for (const SumCase& c : kSums) {
    const int64_t slots = c.tokens * c.topk;
    const auto rows = random_vector(c.rows * c.dim, 7), slot_rows = random_vector(slots * c.dim, 8);
    const auto gates = random_vector(slots, 9, 0.0f, 1.0f);
    const auto idx = random_index(slots, c.rows, uint32_t(slots) + 10);
    for (bool indexed : {false, true})
      for (bool gated : {false, true}) {
        const float* r = indexed ? rows.data() : slot_rows.data();
        const int64_t n_rows = indexed ? c.rows : slots;
        const int32_t* ix = indexed ? idx.data() : nullptr;
        const float* g = gated ? gates.data() : nullptr;
        auto out = testing::nan_vector(c.tokens * c.dim), want = out;
        cpu::moe_combine(r, n_rows, ix, g, c.tokens, c.topk, c.dim, out.data());
        ref::moe_combine(r, ix, g, c.tokens, c.topk, c.dim, want.data());
        EXPECT_TRUE(all_close(out, want, 1e-6, 1.0))
            << c.tokens << "x" << c.topk << " dim " << c.dim << " indexed " << indexed << " gated "
            << gated;
      }
  }
}

// The summation order is part of the contract (the CUDA kernel and the dispatcher's backward
// rely on it): from zero, slot 0, 1, ... in fp32. Sums of wide-ranging values show the order
// (without gates: no multiply whose fusing could differ); weight-1 gates change nothing.
TEST(MoeRows, CombineAddsTheSlotsInSlotOrder) {
  const int64_t tokens = 50, k = 4, dim = 24;
  auto rows = random_vector(tokens * k * dim, 11, -1.0f, 1.0f);
  for (size_t i = 0; i < rows.size(); i += 3) rows[i] *= 1e7f;
  std::vector<float> out(tokens * dim), weighted(tokens * dim), want(tokens * dim);
  cpu::moe_combine(rows.data(), tokens * k, nullptr, nullptr, tokens, k, dim, out.data());
  const std::vector<float> ones(tokens * k, 1.0f);
  cpu::moe_combine(rows.data(), tokens * k, nullptr, ones.data(), tokens, k, dim, weighted.data());
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      volatile float acc = 0.0f;  // no reordering
      for (int64_t j = 0; j < k; ++j) acc = acc + rows[(t * k + j) * dim + d];
      want[t * dim + d] = acc;
    }
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(weighted.data(), want.data(), out.size() * sizeof(float)), 0);
}

TEST(MoeRows, CombineBackwardMatchesReference) {
  for (const SumCase& c : kSums) {
    const int64_t slots = c.tokens * c.topk;
    const auto rows = random_vector(slots * c.dim, 13), dy = random_vector(c.tokens * c.dim, 14);
    const auto gates = random_vector(slots, 15, 0.0f, 1.0f);
    auto d_rows = testing::nan_vector(slots * c.dim), want_rows = d_rows;
    auto d_gates = testing::nan_vector(slots), want_gates = d_gates;
    cpu::moe_combine_backward(rows.data(), gates.data(), dy.data(), c.tokens, c.topk, c.dim,
                              d_rows.data(), d_gates.data());
    ref::moe_combine_backward(rows.data(), gates.data(), dy.data(), c.tokens, c.topk, c.dim,
                              want_rows.data(), want_gates.data());
    EXPECT_EQ(d_rows, want_rows);  // one product each, rounded once
    EXPECT_TRUE(all_close(d_gates, want_gates, 1e-6, 1.0));
  }
}

// combine is bilinear in (rows, gates): <dy, combine(rows, g)> = <d_rows, rows> = <d_gates, g>.
TEST(MoeRows, CombineBackwardIsTheExactAdjoint) {
  const int64_t tokens = 31, k = 3, dim = 19, slots = tokens * k;
  const auto rows = random_vector(slots * dim, 16), dy = random_vector(tokens * dim, 17);
  const auto gates = random_vector(slots, 18, 0.0f, 1.0f);
  std::vector<float> d_rows(slots * dim), d_gates(slots), y(tokens * dim);
  cpu::moe_combine_backward(rows.data(), gates.data(), dy.data(), tokens, k, dim, d_rows.data(),
                            d_gates.data());
  ref::moe_combine(rows.data(), nullptr, gates.data(), tokens, k, dim, y.data());
  double forward = 0;  // in fp64 from the rows, not from the rounded y
  for (int64_t i = 0; i < slots; ++i)
    for (int64_t d = 0; d < dim; ++d)
      forward += double(dy[(i / k) * dim + d]) * gates[i] * rows[i * dim + d];
  const double via_rows = testing::weighted_sum(d_rows, rows);
  const double via_gates = testing::weighted_sum(d_gates, gates);
  EXPECT_NEAR(via_rows, forward, 1e-5 * std::abs(forward) + 1e-5);
  EXPECT_NEAR(via_gates, forward, 1e-5 * std::abs(forward) + 1e-5);
  EXPECT_NEAR(testing::weighted_sum(dy, y), forward, 1e-4 * std::abs(forward) + 1e-4);
}

TEST(MoeRows, CombineBackwardMatchesFiniteDifferences) {
  const int64_t tokens = 6, k = 2, dim = 5, slots = tokens * k;
  const auto rows = random_vector(slots * dim, 19), w = random_vector(tokens * dim, 20);
  const auto gates = random_vector(slots, 21, 0.0f, 1.0f);
  std::vector<float> d_rows(slots * dim), d_gates(slots);
  cpu::moe_combine_backward(rows.data(), gates.data(), w.data(), tokens, k, dim, d_rows.data(),
                            d_gates.data());
  auto loss = [&](const std::vector<float>& r, const std::vector<float>& g) {
    std::vector<float> y(tokens * dim);
    ref::moe_combine(r.data(), nullptr, g.data(), tokens, k, dim, y.data());
    return testing::weighted_sum(w, y);
  };
  EXPECT_TRUE(testing::check_gradient(
      rows, d_rows, [&](const std::vector<float>& r) { return loss(r, gates); }, 1e-2f, 1e-4,
      int(rows.size())));
  EXPECT_TRUE(testing::check_gradient(
      gates, d_gates, [&](const std::vector<float>& g) { return loss(rows, g); }, 1e-2f, 1e-4,
      int(gates.size())));
}

TEST(MoeRows, ResultsAreIdenticalForAnyThreadCount) {
  const int64_t tokens = 2048, k = 2, dim = 64, n_rows = 3000, slots = tokens * k;
  const auto rows = random_vector(n_rows * dim, 22), dy = random_vector(tokens * dim, 23);
  const auto gates = random_vector(slots, 24);
  const auto idx = random_index(slots, n_rows, 25);
  std::vector<float> first_sum, first_gather, first_d_rows, first_d_gates;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    std::vector<float> sum(tokens * dim), gathered(slots * dim), d_rows(slots * dim),
        d_gates(slots);
    cpu::moe_combine(rows.data(), n_rows, idx.data(), gates.data(), tokens, k, dim, sum.data());
    cpu::gather_rows(rows.data(), n_rows, idx.data(), slots, dim * sizeof(float), gathered.data());
    cpu::moe_combine_backward(gathered.data(), gates.data(), dy.data(), tokens, k, dim,
                              d_rows.data(), d_gates.data());
    if (first_sum.empty()) {
      first_sum = sum;
      first_gather = gathered;
      first_d_rows = d_rows;
      first_d_gates = d_gates;
    }
    EXPECT_EQ(sum, first_sum) << threads << " threads";
    EXPECT_EQ(gathered, first_gather) << threads << " threads";
    EXPECT_EQ(d_rows, first_d_rows) << threads << " threads";
    EXPECT_EQ(d_gates, first_d_gates) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace megatron::kernels
