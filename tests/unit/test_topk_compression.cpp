// Top-k gradient sparsification with error feedback (megatron/optimizer/topk_compression.h)
// against a naive reference: the k largest |gradient + residual| (ties to the lower index) are
// sent, sent + new residual is the accumulated gradient exactly, and the gathered sets add up
// in rank order; the entry count and bad indices. (Across ranks and in training:
// tests/parallel/test_grad_compression.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "megatron/core/error.h"
#include "megatron/optimizer/topk_compression.h"

namespace megatron::optim {
namespace {

std::vector<float> normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float value_of(const std::vector<int32_t>& packed, int64_t k, int64_t j) {
  float v;
  std::memcpy(&v, &packed[static_cast<size_t>(k + j)], sizeof v);
  return v;
}

TEST(TopkCompression, KeepsCeilOfTheRatioAtLeastOne) {
  EXPECT_EQ(topk_keep(1000, 0.01), 10);
  EXPECT_EQ(topk_keep(1001, 0.01), 11);
  EXPECT_EQ(topk_keep(5, 0.01), 1);
  EXPECT_EQ(topk_keep(7, 1.0), 7);
  EXPECT_EQ(topk_keep(0, 0.5), 0);
}

TEST(TopkCompression, SendsTheLargestAndKeepsTheRestExactly) {
  const int64_t n = 997, k = topk_keep(n, 0.05);
  const std::vector<float> grads = normal(n, 1);
  std::vector<float> residual = normal(n, 2);
  for (float& r : residual) r *= 0.3f;
  std::vector<float> acc(n);
  for (int64_t i = 0; i < n; ++i) acc[size_t(i)] = residual[size_t(i)] + grads[size_t(i)];
  // Reference: indices by magnitude (ties: lower index), the first k, ascending.
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return std::fabs(acc[size_t(a)]) > std::fabs(acc[size_t(b)]);
  });
  std::vector<int32_t> want(order.begin(), order.begin() + k);
  std::sort(want.begin(), want.end());

  std::vector<int32_t> packed(static_cast<size_t>(2 * k));
  topk_compress(grads.data(), residual.data(), n, k, packed.data());
  EXPECT_EQ(std::vector<int32_t>(packed.begin(), packed.begin() + k), want);
  std::vector<float> sent(n, 0.0f);
  for (int64_t j = 0; j < k; ++j) sent[size_t(packed[size_t(j)])] = value_of(packed, k, j);
  for (int64_t i = 0; i < n; ++i) {
    // A sent entry leaves exactly 0 behind; the rest stays whole: sent + residual == acc.
    EXPECT_EQ(sent[size_t(i)] + residual[size_t(i)], acc[size_t(i)]) << i;
    if (sent[size_t(i)] != 0.0f) {
      EXPECT_EQ(residual[size_t(i)], 0.0f) << i;
    }
  }
}

TEST(TopkCompression, TiesGoToTheLowerIndex) {
  const std::vector<float> grads = {1.0f, -2.0f, 2.0f, 0.5f, -2.0f, 2.0f};
  std::vector<float> residual(grads.size(), 0.0f);
  std::vector<int32_t> packed(4);
  topk_compress(grads.data(), residual.data(), 6, 2, packed.data());
  EXPECT_EQ(packed[0], 1);
  EXPECT_EQ(packed[1], 2);
}

TEST(TopkCompression, GatheredSetsAddUpInRankOrder) {
  const int64_t n = 50, k = 3, ranks = 3;
  std::vector<int32_t> gathered;
  std::vector<double> want(n, 0.0);
  for (int64_t r = 0; r < ranks; ++r) {
    const std::vector<float> g = normal(n, 10 + uint32_t(r));
    std::vector<float> residual(n, 0.0f);
    std::vector<int32_t> packed(2 * k);
    topk_compress(g.data(), residual.data(), n, k, packed.data());
    for (int64_t j = 0; j < k; ++j) want[size_t(packed[size_t(j)])] += value_of(packed, k, j);
    gathered.insert(gathered.end(), packed.begin(), packed.end());
  }
  std::vector<float> out(n, 123.0f);  // overwritten, not added to
  topk_decompress(gathered.data(), ranks, k, out.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(out[size_t(i)], float(want[size_t(i)])) << i;
  gathered[1] = int32_t(n);  // an index outside the bucket: an error, not a stray write
  EXPECT_THROW(topk_decompress(gathered.data(), ranks, k, out.data(), n), Error);
}

}  // namespace
}  // namespace megatron::optim
