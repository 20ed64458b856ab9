#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/reference/cross_entropy.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::nan_vector;
using testing::random_vector;

constexpr int32_t kIgnore = -100;

// Targets among the real tokens, every fourth row ignored.
std::vector<int32_t> make_targets(int64_t N, int64_t valid_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, valid_vocab - 1);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = n % 4 == 3 ? kIgnore : int32_t(dist(rng));
  return t;
}

// Logits with huge values in the padding columns, which must not leak into the softmax.
std::vector<float> make_logits(int64_t N, int64_t V, int64_t valid, uint32_t seed) {
  auto logits = random_vector(N * V, seed, -8.0f, 8.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = valid; v < V; ++v) logits[n * V + v] = 1e4f;
  return logits;
}

struct Case {
  int64_t N, V, valid;
};
const Case kCases[] = {{1, 1, 1}, {7, 7, 5}, {33, 127, 127}, {5, 1000, 997}, {4, 50, 1}};

TEST(CrossEntropy, MatchesReference) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " V=" << c.V << " valid=" << c.valid);
    const VocabSlice vs{c.V, 0, c.valid};
    const auto logits = make_logits(c.N, c.V, c.valid, uint32_t(c.V));
    const auto targets = make_targets(c.N, c.valid, 3);
    auto loss = nan_vector(c.N), lse = loss, loss_ref = loss, lse_ref = loss;
    cpu::cross_entropy_forward(logits.data(), targets.data(), c.N, vs, kIgnore, loss.data(),
                               lse.data());
    ref::cross_entropy_forward(logits.data(), targets.data(), c.N, vs, kIgnore, loss_ref.data(),
                               lse_ref.data());
    EXPECT_TRUE(all_close(loss, loss_ref, 1e-6));
    EXPECT_TRUE(all_close(lse, lse_ref, 1e-6));
    for (int64_t n = 0; n < c.N; ++n)
      EXPECT_TRUE(targets[n] != kIgnore || loss[n] == 0.0f) << "ignored row " << n;

    const auto dloss = random_vector(c.N, 4);
    auto dlogits = nan_vector(c.N * c.V), dlogits_ref = dlogits;
    cpu::cross_entropy_backward(logits.data(), targets.data(), c.N, vs, kIgnore, lse.data(),
                                dloss.data(), dlogits.data());
    ref::cross_entropy_backward(logits.data(), targets.data(), c.N, vs, kIgnore, lse.data(),
                                dloss.data(), dlogits_ref.data());
    EXPECT_TRUE(all_close(dlogits, dlogits_ref, 1e-6));
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t v = 0; v < c.V; ++v) {
        if (targets[n] == kIgnore || v >= c.valid) {
          EXPECT_EQ(dlogits[n * c.V + v], 0.0f);
        }
      }
    }

    // In place: dlogits aliasing logits gives the same gradient.
    auto inplace = logits;
    cpu::cross_entropy_backward(inplace.data(), targets.data(), c.N, vs, kIgnore, lse.data(),
                                dloss.data(), inplace.data());
    EXPECT_EQ(inplace, dlogits);
  }
}

TEST(CrossEntropy, SplitStatisticsMatchReference) {
  const int64_t N = 9, V = 130, valid = 120;
  const VocabSlice vs{V, 0, valid};
  const auto logits = make_logits(N, V, valid, 5);
  const auto targets = make_targets(N, valid, 6);
  auto mx = nan_vector(N), mx_ref = mx, se = mx, se_ref = mx, tl = mx, tl_ref = mx;
  cpu::cross_entropy_row_max(logits.data(), N, vs, mx.data());
  ref::cross_entropy_row_max(logits.data(), N, vs, mx_ref.data());
  EXPECT_EQ(mx, mx_ref);
  cpu::cross_entropy_sum_exp(logits.data(), targets.data(), N, vs, mx.data(), se.data(), tl.data());
  ref::cross_entropy_sum_exp(logits.data(), targets.data(), N, vs, mx.data(), se_ref.data(),
                             tl_ref.data());
  EXPECT_TRUE(all_close(se, se_ref, 1e-6));
  EXPECT_EQ(tl, tl_ref);
  auto loss = nan_vector(N), loss_ref = loss;
  cpu::cross_entropy_loss(targets.data(), N, kIgnore, mx.data(), se.data(), tl.data(), loss.data());
  ref::cross_entropy_loss(targets.data(), N, kIgnore, mx.data(), se.data(), tl.data(),
                          loss_ref.data());
  EXPECT_TRUE(all_close(loss, loss_ref, 1e-6));
}

// Vocab parallel over two slices, the second starting at vocab_start > 0 and holding the
// padding: combining the per-slice statistics (max, then sums) gives the unsplit loss, and
// each slice's backward with the global lse gives its columns of the unsplit gradient.
TEST(CrossEntropy, TwoVocabSlicesCombineToUnsplitResult) {
  const int64_t N = 13, V = 96, valid = 90, V0 = 48, V1 = V - V0;
  const auto logits = make_logits(N, V, valid, 7);
  auto targets = make_targets(N, valid, 8);
  targets[0] = 0;                   // first column of slice 0
  targets[1] = int32_t(V0);         // first column of slice 1
  targets[2] = int32_t(valid - 1);  // last real column
  const VocabSlice full{V, 0, valid}, s0{V0, 0, valid}, s1{V1, V0, valid};
  std::vector<float> part0(N * V0), part1(N * V1);
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(logits.begin() + n * V, V0, part0.begin() + n * V0);
    std::copy_n(logits.begin() + n * V + V0, V1, part1.begin() + n * V1);
  }
  std::vector<float> loss(N), lse(N);
  cpu::cross_entropy_forward(logits.data(), targets.data(), N, full, kIgnore, loss.data(),
                             lse.data());

  std::vector<float> mx0(N), mx1(N), mx(N), se0(N), se1(N), tl0(N), tl1(N);
  cpu::cross_entropy_row_max(part0.data(), N, s0, mx0.data());
  cpu::cross_entropy_row_max(part1.data(), N, s1, mx1.data());
  for (int64_t n = 0; n < N; ++n) mx[n] = std::max(mx0[n], mx1[n]);  // all-reduce MAX
  cpu::cross_entropy_sum_exp(part0.data(), targets.data(), N, s0, mx.data(), se0.data(),
                             tl0.data());
  cpu::cross_entropy_sum_exp(part1.data(), targets.data(), N, s1, mx.data(), se1.data(),
                             tl1.data());
  std::vector<float> se(N), tl(N), split_loss(N), split_lse(N);
  for (int64_t n = 0; n < N; ++n) {  // all-reduce SUM
    se[n] = se0[n] + se1[n];
    tl[n] = tl0[n] + tl1[n];
    EXPECT_TRUE(tl0[n] == 0.0f || tl1[n] == 0.0f) << "target logit counted twice, row " << n;
    split_lse[n] = mx[n] + std::log(se[n]);
  }
  cpu::cross_entropy_loss(targets.data(), N, kIgnore, mx.data(), se.data(), tl.data(),
                          split_loss.data());
  EXPECT_TRUE(all_close(split_loss, loss, 1e-6));

  std::vector<float> dloss = random_vector(N, 9), dfull(N * V), d0(N * V0), d1(N * V1);
  cpu::cross_entropy_backward(logits.data(), targets.data(), N, full, kIgnore, lse.data(),
                              dloss.data(), dfull.data());
  cpu::cross_entropy_backward(part0.data(), targets.data(), N, s0, kIgnore, split_lse.data(),
                              dloss.data(), d0.data());
  cpu::cross_entropy_backward(part1.data(), targets.data(), N, s1, kIgnore, split_lse.data(),
                              dloss.data(), d1.data());
  std::vector<float> joined(N * V);
  for (int64_t n = 0; n < N; ++n) {
    std::copy_n(d0.begin() + n * V0, V0, joined.begin() + n * V);
    std::copy_n(d1.begin() + n * V1, V1, joined.begin() + n * V + V0);
  }
  EXPECT_TRUE(all_close(joined, dfull, 1e-6));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t N = 5, V = 11, valid = 9;
  const VocabSlice vs{V, 0, valid};
  const auto logits = make_logits(N, V, valid, 10);
  const auto targets = make_targets(N, valid, 11);
  const auto w = random_vector(N, 12);
  std::vector<float> loss(N), lse(N);
  cpu::cross_entropy_forward(logits.data(), targets.data(), N, vs, kIgnore, loss.data(),
                             lse.data());
  auto dlogits = nan_vector(N * V);
  cpu::cross_entropy_backward(logits.data(), targets.data(), N, vs, kIgnore, lse.data(), w.data(),
                              dlogits.data());
  EXPECT_TRUE(testing::check_gradient(
      logits, dlogits,
      [&](const std::vector<float>& x) {
        std::vector<float> l(N), s(N);
        ref::cross_entropy_forward(x.data(), targets.data(), N, vs, kIgnore, l.data(), s.data());
        return testing::weighted_sum(w, l);
      },
      1e-2f, 2e-3, int(logits.size())));
}

TEST(CrossEntropy, RejectsTargetsOutsideTheVocabulary) {
  const VocabSlice vs{4, 0, 3};
  const std::vector<float> logits(8, 0.0f);
  std::vector<float> loss(2), lse(2);
  for (int32_t bad : {3, -1, 4}) {
    const std::vector<int32_t> targets = {0, bad};
    EXPECT_THROW(cpu::cross_entropy_forward(logits.data(), targets.data(), 2, vs, kIgnore,
                                            loss.data(), lse.data()),
                 megatron::Error)
        << bad;
  }
}

// bf16 logits are read as stored: every statistic equals the fp32 kernel's on the widened values
// (up to the order the compiler sums the vector lanes in), and dlogits is exactly that kernel's
// fp32 result rounded once to bf16 (also in place).
TEST(CrossEntropy, Bf16LogitsMatchTheFp32KernelOnWidenedValues) {
  const int64_t N = 9, V = 70;
  const VocabSlice vs{V, 0, 67};  // three padding columns
  const auto raw = random_vector(N * V, 41, -6.0f, 6.0f);
  std::vector<bf16_t> l16(raw.size());
  std::vector<float> l32(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    l16[i].bits = math::float_to_bf16_bits(raw[i]);
    l32[i] = math::bf16_bits_to_float(l16[i].bits);
  }
  std::vector<int32_t> targets = {0, 5, 66, -100, 12, 3, 40, 7, 65};
  std::vector<float> loss32(N), lse32(N), loss16(N), lse16(N);
  cpu::cross_entropy_forward(l32.data(), targets.data(), N, vs, -100, loss32.data(), lse32.data());
  cpu::cross_entropy_forward(l16.data(), targets.data(), N, vs, -100, loss16.data(), lse16.data());
  EXPECT_TRUE(all_close(loss16, loss32, 1e-6f, 1e-6f));
  EXPECT_TRUE(all_close(lse16, lse32, 1e-6f, 1e-6f));
  std::vector<float> mx32(N), mx16(N), se32(N), se16(N), t32(N), t16(N);
  cpu::cross_entropy_row_max(l32.data(), N, vs, mx32.data());
  cpu::cross_entropy_row_max(l16.data(), N, vs, mx16.data());
  EXPECT_EQ(mx32, mx16);
  cpu::cross_entropy_sum_exp(l32.data(), targets.data(), N, vs, mx32.data(), se32.data(),
                             t32.data());
  cpu::cross_entropy_sum_exp(l16.data(), targets.data(), N, vs, mx16.data(), se16.data(),
                             t16.data());
  EXPECT_TRUE(all_close(se16, se32, 1e-6f, 1e-6f));
  EXPECT_EQ(t32, t16);
  const auto dloss = random_vector(N, 43);
  std::vector<float> d32(raw.size());
  cpu::cross_entropy_backward(l32.data(), targets.data(), N, vs, -100, lse32.data(), dloss.data(),
                              d32.data());
  std::vector<bf16_t> d16 = l16;  // in place, as the models call it
  cpu::cross_entropy_backward(d16.data(), targets.data(), N, vs, -100, lse32.data(), dloss.data(),
                              d16.data());
  for (size_t i = 0; i < d16.size(); ++i)
    ASSERT_EQ(d16[i].bits, math::float_to_bf16_bits(d32[i])) << "element " << i;
}

}  // namespace
}  // namespace megatron::kernels
