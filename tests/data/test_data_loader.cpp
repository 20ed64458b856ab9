// DataLoader: Megatron's MegatronPretrainingSampler assignment, resume, DP coverage, prefetch
// thread (bounded, clean shutdown, exceptions reach the consumer).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <stdexcept>
#include <thread>

#include "data/data_loader.h"
#include "data_test_util.h"

namespace megatron::data {
namespace {

using testing::expect_input_error;

// Sample i = [i, i + 1, ..., i + seq]; optionally throws at one index; counts reads.
class CountingDataset final : public SampleDataset {
 public:
  CountingDataset(int64_t n, int64_t seq, int64_t throw_at = -1, int delay_us = 0)
      : n_(n), seq_(seq), throw_at_(throw_at), delay_us_(delay_us) {}
  int64_t num_samples() const override { return n_; }
  int64_t seq_length() const override { return seq_; }
  void get(int64_t index, int32_t* out) const override {
    ++reads;
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    if (index == throw_at_)
      throw std::runtime_error("disk on fire at sample " + std::to_string(index));
    MT_CHECK(index >= 0 && index < n_, "index");
    for (int64_t t = 0; t <= seq_; ++t) out[t] = static_cast<int32_t>(index + t);
  }
  std::string describe() const override { return "counting"; }
  mutable std::atomic<int64_t> reads{0};

 private:
  int64_t n_, seq_, throw_at_;
  int delay_us_;
};

// Megatron's MegatronPretrainingSampler, re-stated: the micro-batches of one rank, in order.
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

std::vector<StepBatch> drain(DataLoader& loader) {
  std::vector<StepBatch> out;
  while (auto s = loader.next()) out.push_back(std::move(*s));
  return out;
}

TEST(DataLoader, AssignmentMatchesMegatronSampler) {
  auto ds = std::make_shared<CountingDataset>(100, 4);
  for (int64_t dp : {1, 2, 3}) {
    for (int64_t rank = 0; rank < dp; ++rank) {
      DataLoaderConfig cfg;
      cfg.micro_batch_size = 2;
      cfg.dp_size = dp;
      cfg.dp_rank = rank;
      cfg.global_batch_size = 2 * dp * 3;  // 3 micro-batches per step
      cfg.consumed_samples = 6;
      DataLoader loader(ds, cfg);
      EXPECT_EQ(loader.num_microbatches(), 3);
      const auto steps = drain(loader);
      std::vector<std::vector<int64_t>> got;
      for (const auto& s : steps)
        for (const auto& m : s.sample_indices) got.push_back(m);
      auto want = megatron_sampler(100, 6, 2, rank, dp);
      // Only whole steps are returned.
      const int64_t whole_steps = (100 - 6) / cfg.global_batch_size;
      want.resize(static_cast<size_t>(whole_steps * 3));
      EXPECT_EQ(got, want) << "dp " << dp << " rank " << rank;
      EXPECT_EQ(loader.consumed_samples(), 6 + whole_steps * cfg.global_batch_size);
      // Tokens are the samples' tokens.
      for (const auto& s : steps)
        for (size_t m = 0; m < s.micro_batches.size(); ++m)
          for (size_t b = 0; b < 2; ++b)
            for (size_t t = 0; t < 5; ++t)
              ASSERT_EQ(s.micro_batches[m][b * 5 + t],
                        s.sample_indices[m][b] + static_cast<int64_t>(t));
    }
  }
  // Rank 1 of dp 2, mbs 2, gbs 8, from 0: micro-batches {2,3} {6,7}, then {10,11} {14,15}.
  DataLoaderConfig cfg;
  cfg.micro_batch_size = 2;
  cfg.dp_size = 2;
  cfg.dp_rank = 1;
  cfg.global_batch_size = 8;
  DataLoader loader(ds, cfg);
  auto s0 = loader.next();
  ASSERT_TRUE(s0);
  EXPECT_EQ(s0->sample_indices, (std::vector<std::vector<int64_t>>{{2, 3}, {6, 7}}));
  auto s1 = loader.next();
  EXPECT_EQ(s1->sample_indices, (std::vector<std::vector<int64_t>>{{10, 11}, {14, 15}}));
  EXPECT_EQ(s1->consumed_before, 8);
}

TEST(DataLoader, RanksCoverEachGlobalBatchOnce) {
  auto ds = std::make_shared<CountingDataset>(500, 3);
  const int64_t dp = 4, mbs = 3, gbs = 48;
  std::vector<std::vector<StepBatch>> per_rank;
  for (int64_t r = 0; r < dp; ++r) {
    DataLoaderConfig cfg{gbs, mbs, r, dp, 0, 2, std::nullopt};
    DataLoader loader(ds, cfg);
    per_rank.push_back(drain(loader));
  }
  const size_t steps = per_rank[0].size();
  EXPECT_EQ(steps, 500u / 48u);
  for (size_t k = 0; k < steps; ++k) {
    std::multiset<int64_t> seen;
    for (int64_t r = 0; r < dp; ++r) {
      ASSERT_EQ(per_rank[static_cast<size_t>(r)].size(), steps);
      for (const auto& m : per_rank[static_cast<size_t>(r)][k].sample_indices)
        seen.insert(m.begin(), m.end());
    }
    ASSERT_EQ(seen.size(), static_cast<size_t>(gbs));
    int64_t expect = static_cast<int64_t>(k) * gbs;
    for (int64_t v : seen) ASSERT_EQ(v, expect++);  // exactly [k*gbs, (k+1)*gbs), once each
  }
}

TEST(DataLoader, ResumeMidEpochYieldsTheSameBatches) {
  // A real GPTDataset (mock source) so "mid-epoch" means something.
  MockSequenceSource::Spec spec;
  spec.num_sequences = 200;
  spec.max_length = 60;
  auto src = std::make_shared<MockSequenceSource>(spec);
  GPTDatasetConfig gcfg;
  gcfg.seq_length = 16;
  gcfg.num_samples = 1500;
  const auto ds = GPTDataset::build(src, 0, {0, 200}, gcfg);
  ASSERT_GT(ds->plan().num_epochs, 1);
  for (int64_t rank = 0; rank < 2; ++rank) {
    DataLoaderConfig cfg{32, 4, rank, 2, 0, 3, std::nullopt};
    DataLoader full(ds, cfg);
    const auto all = drain(full);
    ASSERT_GE(all.size(), 40u);
    for (int64_t k : {1, 7, 23}) {
      cfg.consumed_samples = k * 32;
      DataLoader resumed(ds, cfg);
      const auto rest = drain(resumed);
      ASSERT_EQ(rest.size(), all.size() - static_cast<size_t>(k));
      for (size_t i = 0; i < rest.size(); ++i) {
        ASSERT_EQ(rest[i].consumed_before, all[i + static_cast<size_t>(k)].consumed_before);
        ASSERT_EQ(rest[i].sample_indices, all[i + static_cast<size_t>(k)].sample_indices);
        ASSERT_EQ(rest[i].micro_batches, all[i + static_cast<size_t>(k)].micro_batches);
      }
    }
  }
}

TEST(DataLoader, PrefetchAndSynchronousAgree) {
  auto ds = std::make_shared<CountingDataset>(300, 7);
  DataLoaderConfig cfg{24, 2, 1, 3, 0, 0, std::nullopt};
  DataLoader sync(ds, cfg);
  cfg.prefetch_steps = 4;
  DataLoader async(ds, cfg);
  const auto a = drain(sync), b = drain(async);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].sample_indices, b[i].sample_indices);
    EXPECT_EQ(a[i].micro_batches, b[i].micro_batches);
  }
  EXPECT_FALSE(sync.next());  // stays at the end
  EXPECT_FALSE(async.next());
}

TEST(DataLoader, EndAndTotalSamples) {
  auto ds = std::make_shared<CountingDataset>(50, 2);
  DataLoaderConfig cfg{12, 2, 0, 2, 0, 2, std::nullopt};
  DataLoader loader(ds, cfg);
  EXPECT_EQ(drain(loader).size(), 4u);  // 48 <= 50 < 60
  EXPECT_EQ(loader.consumed_samples(), 48);
  cfg.total_samples = 30;
  DataLoader capped(ds, cfg);
  EXPECT_EQ(drain(capped).size(), 2u);
  cfg.total_samples = std::nullopt;
  cfg.consumed_samples = 50;
  DataLoader done(ds, cfg);
  EXPECT_FALSE(done.next());
}

TEST(DataLoader, BoundedPrefetch) {
  auto ds = std::make_shared<CountingDataset>(10000, 2);
  DataLoaderConfig cfg{8, 2, 0, 1, 0, 2, std::nullopt};
  DataLoader loader(ds, cfg);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // At most 2 steps of 8 samples are read ahead (the producer then waits).
  EXPECT_LE(ds->reads.load(), 16);
  ASSERT_TRUE(loader.next());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_LE(ds->reads.load(), 24);
}

TEST(DataLoader, ExceptionsReachTheConsumer) {
  for (int64_t prefetch : {0, 1, 3}) {
    auto ds = std::make_shared<CountingDataset>(200, 2, /*throw_at=*/37);
    DataLoaderConfig cfg{8, 4, 0, 1, 0, prefetch, std::nullopt};
    DataLoader loader(ds, cfg);
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(loader.next()) << k;  // samples 0..31
    try {
      loader.next();  // step 4 holds sample 37
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("sample 37"), std::string::npos);
    }
    EXPECT_THROW(loader.next(), std::runtime_error);  // and again
    EXPECT_EQ(loader.consumed_samples(), 32);
  }
}

TEST(DataLoader, ShutdownWithAFullQueueAndASlowDataset) {
  for (int i = 0; i < 5; ++i) {
    auto ds = std::make_shared<CountingDataset>(100000, 2, -1, /*delay_us=*/200);
    DataLoaderConfig cfg{16, 4, 0, 1, 0, 2, std::nullopt};
    const auto t0 = std::chrono::steady_clock::now();
    {
      DataLoader loader(ds, cfg);
      if (i % 2) loader.next();
      std::this_thread::sleep_for(std::chrono::milliseconds(i * 3));
    }  // destructor joins
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  }
}

TEST(DataLoader, ConfigErrors) {
  auto ds = std::make_shared<CountingDataset>(100, 2);
  expect_input_error(
      [&] {
        DataLoader(ds, {10, 4, 0, 1, 0, 2, std::nullopt});
      },
      {"global_batch_size 10", "4 x 1"});
  expect_input_error([&] { DataLoader(ds, {8, 4, 2, 2, 0, 2, std::nullopt}); }, {"dp_rank 2"});
  expect_input_error(
      [&] {
        DataLoader(ds, {8, 0, 0, 1, 0, 2, std::nullopt});
      },
      {"micro_batch_size"});
  expect_input_error(
      [&] {
        DataLoader(ds, {8, 4, 0, 1, -8, 2, std::nullopt});
      },
      {"consumed_samples"});
  expect_input_error([&] { DataLoader(ds, {8, 4, 0, 1, 0, 2, 101}); }, {"total_samples 101"});
}

}  // namespace
}  // namespace megatron::data
