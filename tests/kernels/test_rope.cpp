#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/common/yarn.h"
#include "kernels/cpu/reference/rope.h"
#include "kernels/cpu/rope.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

int64_t qkv_size(const AttentionShape& s) { return s.S * s.B * (s.H + 2 * s.G) * s.Dh; }

// Offset of element d of slot `slot` (0..H/G-1 queries, H/G key, H/G+1 value) of group g.
int64_t offset(const AttentionShape& s, int64_t t, int64_t b, int64_t g, int64_t slot, int64_t d) {
  return (((t * s.B + b) * s.G + g) * (s.H / s.G + 2) + slot) * s.Dh + d;
}

const AttentionShape kShapes[] = {
    {1, 1, 1, 1, 2}, {7, 2, 4, 2, 8}, {33, 3, 6, 3, 16}, {5, 1, 4, 1, 64}, {65, 2, 2, 2, 6}};

TEST(Rope, MatchesReferenceAndLeavesValuesAlone) {
  for (const AttentionShape& s : kShapes) {
    for (int64_t pos : {0, 5, 1000}) {
      SCOPED_TRACE(::testing::Message() << "S=" << s.S << " H=" << s.H << " G=" << s.G
                                        << " Dh=" << s.Dh << " pos=" << pos);
      const auto x = random_vector(qkv_size(s), uint32_t(s.S * s.Dh));
      auto y = x, y_ref = x;
      cpu::rope_forward(s, y.data(), 10000.0f, pos);
      ref::rope_forward(s, y_ref.data(), 10000.0f, pos);
      EXPECT_TRUE(all_close(y, y_ref, 1e-6));
      for (int64_t t = 0; t < s.S; ++t)
        for (int64_t b = 0; b < s.B; ++b)
          for (int64_t g = 0; g < s.G; ++g)
            for (int64_t d = 0; d < s.Dh; ++d) {
              const int64_t i = offset(s, t, b, g, s.H / s.G + 1, d);
              ASSERT_EQ(y[i], x[i]) << "value head changed";
            }
      auto dx = x, dx_ref = x;
      cpu::rope_backward(s, dx.data(), 500000.0f, pos);
      ref::rope_backward(s, dx_ref.data(), 500000.0f, pos);
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-6));
      cpu::rope_backward(s, y.data(), 10000.0f, pos);  // the inverse rotation undoes forward
      EXPECT_TRUE(all_close(y, x, 1e-6));
    }
  }
}

// LLaMA-3.1 frequency scaling: the optimized kernel equals the reference with the same scaled
// frequencies, and differs from the unscaled rotation where the low frequencies matter.
TEST(Rope, ScaledFrequenciesMatchReference) {
  math::RopeFrequencies scaled(500000.0f);
  scaled.factor = 8.0f;
  for (const AttentionShape& s : kShapes) {
    const auto x = random_vector(qkv_size(s), uint32_t(7 * s.S + s.Dh));
    auto y = x, y_ref = x, plain = x;
    cpu::rope_forward(s, y.data(), scaled, 3000);
    ref::rope_forward(s, y_ref.data(), scaled, 3000);
    cpu::rope_forward(s, plain.data(), 500000.0f, 3000);
    EXPECT_TRUE(all_close(y, y_ref, 1e-6));
    if (s.Dh >= 8) {
      EXPECT_FALSE(all_close(y, plain, 1e-4)) << "scaling changed nothing";
    }
    cpu::rope_backward(s, y.data(), scaled, 3000);
    EXPECT_TRUE(all_close(y, x, 1e-5));
  }
}

// Linear position interpolation by 2: every frequency halved, so position 2p turns exactly as
// position p does unscaled (halving and doubling are exact in fp32); the reference agrees.
TEST(Rope, LinearInterpolationCompressesPositions) {
  math::RopeFrequencies linear(10000.0f);
  linear.linear_factor = 2.0f;
  for (const AttentionShape& s : kShapes) {
    const auto x = random_vector(qkv_size(s), uint32_t(11 * s.S + s.Dh));
    std::vector<int32_t> doubled(static_cast<size_t>(s.S * s.B)), plain(doubled.size());
    for (int64_t t = 0; t < s.S; ++t)
      for (int64_t b = 0; b < s.B; ++b) {
        plain[static_cast<size_t>(t * s.B + b)] = static_cast<int32_t>(3 * t + b);
        doubled[static_cast<size_t>(t * s.B + b)] = static_cast<int32_t>(2 * (3 * t + b));
      }
    auto y = x, y_ref = x, want = x;
    cpu::rope_forward(s, y.data(), linear, 0, doubled.data());
    ref::rope_forward(s, y_ref.data(), linear, 0, doubled.data());
    cpu::rope_forward(s, want.data(), 10000.0f, 0, plain.data());
    EXPECT_EQ(y, want);
    EXPECT_TRUE(all_close(y_ref, want, 1e-6));
  }
}

// YaRN: the optimized kernel equals the reference with the same blended frequencies and
// concentration; the concentration scales every rotated pair's length (cos^2 + sin^2 = c^2), so
// backward undoes forward up to c^2, and value heads stay untouched.
TEST(Rope, YarnMatchesReferenceAndScalesByTheConcentration) {
  math::YarnParams y;
  y.factor = 8.0;
  y.original_max_positions = 256.0;
  for (const AttentionShape& s : kShapes) {
    const math::RopeFrequencies f = math::yarn_frequencies(10000.0f, s.Dh, y);
    ASSERT_GT(f.attention_scale, 1.0f);
    const auto x = random_vector(qkv_size(s), uint32_t(13 * s.S + s.Dh));
    auto out = x, out_ref = x;
    cpu::rope_forward(s, out.data(), f, 700);
    ref::rope_forward(s, out_ref.data(), f, 700);
    EXPECT_TRUE(all_close(out, out_ref, 1e-6));
    const double c2 = double(f.attention_scale) * f.attention_scale;
    double in_norm = 0, out_norm = 0;
    for (int64_t t = 0; t < s.S; ++t)
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t d = 0; d < s.Dh; ++d) {  // the first query head of group 0
          in_norm += double(x[offset(s, t, b, 0, 0, d)]) * x[offset(s, t, b, 0, 0, d)];
          out_norm += double(out[offset(s, t, b, 0, 0, d)]) * out[offset(s, t, b, 0, 0, d)];
          const int64_t v = offset(s, t, b, 0, s.H / s.G + 1, d);
          ASSERT_EQ(out[v], x[v]) << "value head changed";
        }
    EXPECT_NEAR(out_norm, c2 * in_norm, 1e-5 * c2 * in_norm);
    // Backward (the transposed rotation, also scaled) brings the rotated heads back times c^2.
    cpu::rope_backward(s, out.data(), f, 700);
    std::vector<float> want = x;
    for (int64_t t = 0; t < s.S; ++t)
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t g = 0; g < s.G; ++g)
          for (int64_t slot = 0; slot <= s.H / s.G; ++slot)  // query heads and the key head
            for (int64_t d = 0; d < s.Dh; ++d) {
              const int64_t i = offset(s, t, b, g, slot, d);
              want[i] = static_cast<float>(x[i] * c2);
            }
    EXPECT_TRUE(all_close(out, want, 1e-5));
  }
}

// Pair (0, Dh/2) turns by exactly `position` radians (inv_freq 1); position 0 is the identity.
TEST(Rope, KnownRotation) {
  const AttentionShape s{2, 1, 1, 1, 4};
  std::vector<float> x(qkv_size(s), 0.0f);
  for (int64_t t = 0; t < 2; ++t) x[offset(s, t, 0, 0, 0, 0)] = 1.0f;  // query, first pair
  cpu::rope_forward(s, x.data(), 10000.0f, 3);
  for (int64_t t = 0; t < 2; ++t) {
    EXPECT_NEAR(x[offset(s, t, 0, 0, 0, 0)], std::cos(3.0 + t), 1e-6);
    EXPECT_NEAR(x[offset(s, t, 0, 0, 0, 2)], std::sin(3.0 + t), 1e-6);
  }
  std::vector<float> y = random_vector(qkv_size(s), 1), y0 = y;
  const AttentionShape one{1, 1, 1, 1, 4};
  cpu::rope_forward(one, y.data(), 10000.0f, 0);
  EXPECT_EQ(y, y0);
}

// The point of RoPE: q.k after rotation depends only on the position difference.
TEST(Rope, DotProductDependsOnRelativePosition) {
  const AttentionShape s{1, 1, 1, 1, 32};
  const auto base = random_vector(qkv_size(s), 3);
  auto dot_at = [&](int64_t q_pos, int64_t k_pos) {
    auto a = base, b = base;
    cpu::rope_forward(s, a.data(), 10000.0f, q_pos);
    cpu::rope_forward(s, b.data(), 10000.0f, k_pos);
    double dot = 0.0;
    for (int64_t d = 0; d < s.Dh; ++d)
      dot += double(a[offset(s, 0, 0, 0, 0, d)]) * b[offset(s, 0, 0, 0, 1, d)];
    return dot;
  };
  EXPECT_NEAR(dot_at(10, 3), dot_at(107, 100), 1e-4);
  EXPECT_NEAR(dot_at(0, 5), dot_at(20, 25), 1e-4);
}

// RoPE is linear in qkv, so backward(dy = w) must be d(sum(w * rope(x)))/dx.
TEST(Rope, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{5, 2, 4, 2, 8};
  const auto x = random_vector(qkv_size(s), 4), w = random_vector(qkv_size(s), 5);
  auto dx = w;
  cpu::rope_backward(s, dx.data(), 10000.0f, 7);
  EXPECT_TRUE(testing::check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        auto y = v;
        ref::rope_forward(s, y.data(), 10000.0f, 7);
        return testing::weighted_sum(w, y);
      },
      1e-2f, 1e-4, 64));
}

}  // namespace
}  // namespace megatron::kernels

namespace megatron::kernels {
namespace {

// Partial rotary embeddings (RopeFrequencies::rotary_dims, Megatron's rotary_percent): the first
// R dimensions of every query and key head turn exactly as a head of size R would (frequencies
// over R, pairs i and i + R/2), the others and the value heads are left alone; backward is the
// transpose (finite differences).
TEST(Rope, PartialRotaryTurnsTheFirstDimsAsAHeadOfThatSize) {
  const AttentionShape s{6, 2, 4, 2, 10}, head{6, 2, 4, 2, 6};  // R = 6 of Dh = 10
  math::RopeFrequencies partial(10000.0f);
  partial.rotary_dims = 6;
  const auto x = random_vector(qkv_size(s), 31);
  auto y = x, y_ref = x;
  cpu::rope_forward(s, y.data(), partial, 3);
  ref::rope_forward(s, y_ref.data(), partial, 3);
  EXPECT_TRUE(all_close(y, y_ref, 1e-6));
  // The same numbers through a whole-head rope of size 6 on the first 6 dims of each head.
  std::vector<float> small(static_cast<size_t>(qkv_size(head)));
  for (int64_t h = 0; h < qkv_size(s) / s.Dh; ++h)
    for (int64_t d = 0; d < 6; ++d) small[h * 6 + d] = x[h * s.Dh + d];
  cpu::rope_forward(head, small.data(), 10000.0f, 3);
  for (int64_t h = 0; h < qkv_size(s) / s.Dh; ++h) {
    const bool value_head = h % (s.H / s.G + 2) == s.H / s.G + 1;
    for (int64_t d = 0; d < s.Dh; ++d) {
      const float want = d < 6 ? small[h * 6 + d] : x[h * s.Dh + d];
      ASSERT_EQ(y[h * s.Dh + d], value_head ? x[h * s.Dh + d] : want) << "head " << h << " d " << d;
    }
  }
  const auto w = random_vector(qkv_size(s), 32);
  auto dx = w;
  cpu::rope_backward(s, dx.data(), partial, 3);
  EXPECT_TRUE(testing::check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        auto out = v;
        ref::rope_forward(s, out.data(), partial, 3);
        return testing::weighted_sum(w, out);
      },
      1e-2f, 1e-4, 64));
  math::RopeFrequencies odd = partial;
  odd.rotary_dims = 5;
  EXPECT_THROW(cpu::rope_forward(s, y.data(), odd, 0), megatron::Error);
}

}  // namespace
}  // namespace megatron::kernels
