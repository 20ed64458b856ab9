#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/common/philox.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/kernel_util.h"
#include "kernels/cpu/reference/dropout.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::nan_vector;
using testing::random_vector;

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors file.
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const auto r =
        philox::philox4x32_10(k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3], k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(r.v[i], k.out[i]) << std::hex << k.ctr[0] << " word " << i;
  }
}

TEST(Philox, UniformAndNormalMoments) {
  const int n = 200000;
  double su = 0, suu = 0, sn = 0, snn = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const float u = philox::uniform(11, 3, uint64_t(i));
    const float z = philox::normal(11, 3, uint64_t(i));
    su += u;
    suu += double(u) * u;
    sn += z;
    snn += double(z) * z;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(suu / n - (su / n) * (su / n), 1.0 / 12.0, 0.002);
  EXPECT_NEAR(sn / n, 0.0, 0.01);  // 4.5 standard errors
  EXPECT_NEAR(snn / n - (sn / n) * (sn / n), 1.0, 0.015);
}

TEST(Philox, StreamsAndSeedsDiffer) {
  int same_stream = 0, same_seed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same_stream += philox::random_u32(1, 0, i) == philox::random_u32(1, 1, i);
    same_seed += philox::random_u32(1, 0, i) == philox::random_u32(2, 0, i);
  }
  EXPECT_LE(same_stream, 1);
  EXPECT_LE(same_seed, 1);
}

// The kernels draw whole Philox blocks at a time; that must equal uniform() per element for
// any start alignment and length.
TEST(Philox, BlockFillMatchesPerElementUniform) {
  for (uint64_t start : {0ull, 1ull, 2ull, 3ull, 4ull, 5ull, (1ull << 32) - 3}) {
    for (int64_t n : {0, 1, 2, 3, 4, 5, 9, 64, 67}) {
      std::vector<float> u(n);
      cpu::detail::fill_uniform(5, 6, start, n, u.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(u[i], philox::uniform(5, 6, start + uint64_t(i))) << start << "+" << i;
    }
  }
}

TEST(Dropout, MatchesReference) {
  for (int64_t n : {1, 3, 7, 33, 127, 5000, 70000}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      for (uint64_t offset : {0ull, 3ull, 1000001ull}) {
        const auto x = random_vector(n, uint32_t(n));
        auto y = nan_vector(n), y_ref = y, dx = y, dx_ref = y;
        cpu::dropout_forward(x.data(), y.data(), n, p, 42, 7, offset);
        ref::dropout_forward(x.data(), y_ref.data(), n, p, 42, 7, offset);
        EXPECT_TRUE(all_close(y, y_ref, 1e-6)) << n << " p=" << p;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i] == 0.0f, y_ref[i] == 0.0f) << i;
        cpu::dropout_backward(x.data(), dx.data(), n, p, 42, 7, offset);
        ref::dropout_backward(x.data(), dx_ref.data(), n, p, 42, 7, offset);
        EXPECT_TRUE(all_close(dx, dx_ref, 1e-6)) << n << " p=" << p;
      }
    }
  }
}

TEST(Dropout, ShardsReproduceTheUnshardedMask) {
  const int64_t n = 1001, split = 387;             // an odd split: shards start mid Philox block
  const auto x = random_vector(n, 1, 0.5f, 1.5f);  // no zeros in x
  std::vector<float> whole(n), sharded(n);
  cpu::dropout_forward(x.data(), whole.data(), n, 0.3f, 9, 2, 0);
  cpu::dropout_forward(x.data(), sharded.data(), split, 0.3f, 9, 2, 0);
  cpu::dropout_forward(x.data() + split, sharded.data() + split, n - split, 0.3f, 9, 2,
                       uint64_t(split));
  EXPECT_EQ(whole, sharded);
}

// dropout_rows over [S, B, D] = the flat kernel per row at its global index, and a sequence
// slice (S/2 rows at seq_offset) or a later micro-batch (batch_offset) reproduces its part of
// the whole global tensor's mask.
TEST(Dropout, RowsFollowTheGlobalLayout) {
  const int64_t S = 6, B = 3, D = 10;  // D % 4 != 0: rows start mid Philox block
  const auto x = random_vector(S * B * D, 3, 0.5f, 1.5f);
  DropoutRows rows{S, B, D, /*batch_offset=*/2, /*seq_offset=*/0, /*seq_total=*/S};
  std::vector<float> got(x.size()), want(x.size());
  cpu::dropout_rows(x.data(), got.data(), rows, 0.4f, 5, 7);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t r = s * B + b;
      const uint64_t index = static_cast<uint64_t>(((2 + b) * S + s) * D);
      EXPECT_EQ(rows.row_index(r), index);
      cpu::dropout_forward(x.data() + r * D, want.data() + r * D, D, 0.4f, 5, 7, index);
    }
  EXPECT_EQ(got, want);
  // The second half of the sequence as a sequence-parallel slice.
  const int64_t half = S / 2;
  DropoutRows slice{half, B, D, 2, half, S};
  std::vector<float> part(static_cast<size_t>(half * B * D));
  cpu::dropout_rows(x.data() + half * B * D, part.data(), slice, 0.4f, 5, 7);
  EXPECT_EQ(part, std::vector<float>(got.begin() + half * B * D, got.end()));
  // Features [4, 10) of every row as a tensor-parallel shard (d_offset 4 of d_total 10).
  const int64_t F = 6;
  std::vector<float> xs(static_cast<size_t>(S * B * F)), shard(xs.size());
  for (int64_t r = 0; r < S * B; ++r)
    for (int64_t d = 0; d < F; ++d) xs[r * F + d] = x[r * D + 4 + d];
  DropoutRows features{S, B, F, 2, 0, S, /*d_offset=*/4, /*d_total=*/D};
  cpu::dropout_rows(xs.data(), shard.data(), features, 0.4f, 5, 7);
  for (int64_t r = 0; r < S * B; ++r)
    for (int64_t d = 0; d < F; ++d)
      EXPECT_EQ(shard[r * F + d], got[r * D + 4 + d]) << r << " " << d;
}

TEST(Dropout, KeepFractionAndScale) {
  const int64_t n = 400000;
  const float p = 0.3f;
  const std::vector<float> x(n, 1.0f);
  std::vector<float> y(n);
  cpu::dropout_forward(x.data(), y.data(), n, p, 123, 0, 0);
  int64_t kept = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      ASSERT_FLOAT_EQ(v, 1.0f / (1.0f - p));
    }
  }
  // 5 standard deviations of the binomial keep count.
  EXPECT_NEAR(double(kept) / n, 1.0 - p, 5.0 * std::sqrt(p * (1.0 - p) / n));
}

TEST(Dropout, EdgeProbabilities) {
  const auto x = random_vector(100, 1);
  std::vector<float> y(100);
  cpu::dropout_forward(x.data(), y.data(), 100, 0.0f, 1, 1, 0);
  EXPECT_EQ(y, x);
  cpu::dropout_forward(x.data(), y.data(), 100, 1.0f, 1, 1, 0);
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

// Dropout is linear with a fixed mask: backward(dy = w) is d(sum(w * y))/dx.
TEST(Dropout, BackwardMatchesFiniteDifferences) {
  const int64_t n = 37;
  const auto x = random_vector(n, 2), w = random_vector(n, 3);
  auto dx = nan_vector(n);
  cpu::dropout_backward(w.data(), dx.data(), n, 0.4f, 5, 1, 17);
  EXPECT_TRUE(testing::check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        std::vector<float> y(n);
        ref::dropout_forward(v.data(), y.data(), n, 0.4f, 5, 1, 17);
        return testing::weighted_sum(w, y);
      },
      1e-2f, 1e-4, int(n)));
}

}  // namespace
}  // namespace megatron::kernels
