// The trainer's sample assignment (megatron/training/sampler.h) is Megatron's
// MegatronPretrainingSampler: checked against a re-statement of its loop, for coverage of each
// global batch by the data-parallel ranks, and for resume (a step depends only on the samples
// consumed before it).
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "megatron/training/sampler.h"

namespace megatron::training {
namespace {

// Megatron's MegatronPretrainingSampler.__iter__, re-stated: the micro-batches of one rank.
std::vector<std::vector<int64_t>> megatron_sampler(int64_t total, int64_t consumed, int64_t mbs,
                                                   int64_t rank, int64_t dp) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> batch;
  for (int64_t idx = consumed; idx < total; ++idx) {
    batch.push_back(idx);
    if (static_cast<int64_t>(batch.size()) == mbs * dp) {
      out.emplace_back(batch.begin() + rank * mbs, batch.begin() + (rank + 1) * mbs);
      batch.clear();
    }
  }
  return out;
}

// This rank's micro-batches of `steps` steps of global_batch samples from `consumed` on.
std::vector<std::vector<int64_t>> ours(const PretrainingSampler& s, int64_t consumed,
                                       int64_t global_batch, int64_t steps) {
  std::vector<std::vector<int64_t>> out;
  const int64_t micro = s.rounds(global_batch);
  for (int64_t k = 0; k < steps; ++k)
    for (int64_t m = 0; m < micro; ++m) {
      std::vector<int64_t> mb;
      const int64_t first = s.first_sample(consumed + k * global_batch, m);
      for (int64_t b = 0; b < s.micro_batch_size; ++b) mb.push_back(first + b);
      out.push_back(mb);
    }
  return out;
}

TEST(PretrainingSampler, AssignmentMatchesMegatronSampler) {
  for (int64_t dp : {1, 2, 3}) {
    for (int64_t rank = 0; rank < dp; ++rank) {
      const int64_t mbs = 2, gbs = 2 * dp * 3, consumed = 6, total = 100;
      const PretrainingSampler s{mbs, dp, rank};
      EXPECT_EQ(s.rounds(gbs), 3);
      const int64_t steps = (total - consumed) / gbs;  // whole steps only (drop_last)
      auto want = megatron_sampler(total, consumed, mbs, rank, dp);
      want.resize(static_cast<size_t>(steps * 3));
      EXPECT_EQ(ours(s, consumed, gbs, steps), want) << "dp " << dp << " rank " << rank;
    }
  }
  // Rank 1 of dp 2, mbs 2, gbs 8, from 0: micro-batches {2,3} {6,7}, then {10,11} {14,15}.
  const PretrainingSampler s{2, 2, 1};
  EXPECT_EQ(ours(s, 0, 8, 2),
            (std::vector<std::vector<int64_t>>{{2, 3}, {6, 7}, {10, 11}, {14, 15}}));
  EXPECT_EQ(s.position(1), 6);
}

TEST(PretrainingSampler, RanksCoverEachGlobalBatchOnce) {
  const int64_t dp = 4, mbs = 3, gbs = 48, steps = 10;
  for (int64_t k = 0; k < steps; ++k) {
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < dp; ++r)
      for (const auto& mb : ours(PretrainingSampler{mbs, dp, r}, k * gbs, gbs, 1))
        seen.insert(mb.begin(), mb.end());
    ASSERT_EQ(seen.size(), static_cast<size_t>(gbs));
    int64_t expect = k * gbs;
    for (int64_t v : seen) ASSERT_EQ(v, expect++);  // exactly [k*gbs, (k+1)*gbs), once each
  }
}

TEST(PretrainingSampler, ResumedStepsAreTheUninterruptedOnes) {
  const PretrainingSampler s{2, 2, 1};
  const auto whole = ours(s, 0, 8, 6);
  const auto resumed = ours(s, 3 * 8, 8, 3);
  EXPECT_EQ(resumed, std::vector<std::vector<int64_t>>(whole.begin() + 6, whole.end()));
}

}  // namespace
}  // namespace megatron::training
