// The CPU flash attention (kernels/cpu/flash_attention.h) against the unfused CPU attention
// (kernels/cpu/attention.h): same outputs and gradients, dropout masks included.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/reference/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::nan_vector;
using testing::random_vector;

int64_t qkv_size(const AttentionShape& s) { return s.S * s.B * (s.H + 2 * s.G) * s.Dh; }
int64_t out_size(const AttentionShape& s) { return s.S * s.B * s.H * s.Dh; }
int64_t probs_size(const AttentionShape& s) { return s.B * s.H * s.S * s.S; }
int64_t lse_size(const AttentionShape& s) { return s.B * s.H * s.S; }

// Random holes (about 1 key in 4), batch row B-1 fully masked when B > 1, key 0 of batch 0
// masked (under a causal mask query 0 of batch 0 sees nothing).
std::vector<uint8_t> make_key_mask(const AttentionShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> mask(s.B * s.S);
  for (auto& m : mask) m = rng() % 4 != 0;
  if (s.B > 1)
    for (int64_t j = 0; j < s.S; ++j) mask[(s.B - 1) * s.S + j] = 0;
  mask[0] = 0;
  return mask;
}

struct Case {
  AttentionShape shape;
  bool causal, padding;
  float dropout, scale;  // scale 0: 1/sqrt(Dh)
};

AttentionOptions options_for(const Case& c, const std::vector<uint8_t>& mask) {
  AttentionOptions opt{};
  opt.scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(float(c.shape.Dh));
  opt.causal = c.causal;
  opt.key_mask = c.padding ? mask.data() : nullptr;
  opt.dropout_p = c.dropout;
  opt.seed = 1234;
  opt.stream = 5;
  return opt;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run_flash(const AttentionShape& s, const AttentionOptions& opt,
                 const std::vector<float>& qkv, const std::vector<float>& dout) {
  Result r{nan_vector(out_size(s)), nan_vector(lse_size(s)), nan_vector(qkv_size(s))};
  cpu::flash_attention_forward(s, opt, qkv.data(), r.out.data(), r.lse.data());
  cpu::flash_attention_backward(s, opt, qkv.data(), r.out.data(), r.lse.data(), dout.data(),
                                r.dqkv.data());
  return r;
}

struct Unfused {
  std::vector<float> out, probs, dqkv;
};

Unfused run_unfused(const AttentionShape& s, const AttentionOptions& opt,
                    const std::vector<float>& qkv, const std::vector<float>& dout) {
  Unfused r{nan_vector(out_size(s)), nan_vector(probs_size(s)), nan_vector(qkv_size(s))};
  cpu::attention_forward(s, opt, qkv.data(), r.out.data(), r.probs.data());
  cpu::attention_backward(s, opt, qkv.data(), r.probs.data(), dout.data(), r.dqkv.data());
  return r;
}

const Case kCases[] = {
    {{7, 2, 2, 2, 5}, true, false, 0.0f, 0.0f},
    {{9, 3, 4, 2, 8}, false, true, 0.0f, 0.3f},   // GQA, holes, a fully masked batch row
    {{70, 2, 3, 1, 16}, true, true, 0.2f, 0.0f},  // MQA
    {{65, 1, 2, 2, 4}, false, false, 0.5f, 1.7f},
    {{1, 2, 1, 1, 3}, true, false, 0.0f, 0.0f},
    {{33, 2, 6, 3, 7, 6, 12, 4}, true, true, 0.1f, 0.0f},  // TP/DP offsets into the dropout index
    {{130, 1, 2, 1, 8}, true, false, 0.0f, 0.0f},
    {{20, 2, 4, 4, 32}, false, true, 0.3f, 0.0f},
    {{300, 1, 2, 1, 8}, false, true, 0.2f, 0.0f},  // crosses the 256-row and -key tiles
    {{600, 1, 2, 1, 16}, true, true, 0.1f, 0.0f},  // three tiles of each, causal
    {{261, 2, 4, 2, 64}, true, true, 0.1f, 0.0f},
    {{200, 1, 4, 1, 128}, false, false, 0.0f, 0.0f},
};

TEST(FlashAttention, MatchesUnfused) {
  uint32_t seed = 1;
  for (const Case& c : kCases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(::testing::Message()
                 << "S=" << s.S << " B=" << s.B << " H=" << s.H << " G=" << s.G << " Dh=" << s.Dh
                 << " causal=" << c.causal << " padding=" << c.padding << " p=" << c.dropout);
    const auto mask = make_key_mask(s, seed);
    const AttentionOptions opt = options_for(c, mask);
    const auto qkv = random_vector(qkv_size(s), seed++, -2.0f, 2.0f);
    const auto dout = random_vector(out_size(s), seed++);
    const Result got = run_flash(s, opt, qkv, dout);
    const Unfused want = run_unfused(s, opt, qkv, dout);
    EXPECT_TRUE(all_close(got.out, want.out, 1e-5));
    EXPECT_TRUE(all_close(got.dqkv, want.dqkv, 1e-5));

    // lse: log sum_j exp(score_ij) over visible keys; -inf (and zero output) for empty rows.
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t h = 0; h < s.H; ++h) {
        for (int64_t i = 0; i < s.S; ++i) {
          bool any_visible = false;
          for (int64_t j = 0; j < s.S; ++j)
            any_visible |= !(c.causal && j > i) && !(c.padding && mask[b * s.S + j] == 0);
          const float l = got.lse[(b * s.H + h) * s.S + i];
          if (!any_visible) {
            ASSERT_EQ(l, -std::numeric_limits<float>::infinity());
            for (int64_t d = 0; d < s.Dh; ++d)
              ASSERT_EQ(got.out[((i * s.B + b) * s.H + h) * s.Dh + d], 0.0f);
          } else {
            ASSERT_TRUE(std::isfinite(l));
          }
        }
      }
    }
  }
}

// The probabilities exp(score - lse) rebuilt from lse are the unfused forward's probabilities.
TEST(FlashAttention, LseReproducesProbabilities) {
  const Case c{{40, 2, 2, 1, 8}, true, true, 0.0f, 0.0f};
  const AttentionShape& s = c.shape;
  const auto mask = make_key_mask(s, 2);
  const AttentionOptions opt = options_for(c, mask);
  const auto qkv = random_vector(qkv_size(s), 3, -2.0f, 2.0f), dout = random_vector(out_size(s), 4);
  const Result got = run_flash(s, opt, qkv, dout);
  const Unfused want = run_unfused(s, opt, qkv, dout);
  const int64_t width = (s.H + 2 * s.G) * s.Dh, hpg = s.H / s.G;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t i = 0; i < s.S; ++i) {
        const float l = got.lse[(b * s.H + h) * s.S + i];
        for (int64_t j = 0; j < s.S; ++j) {
          const float want_p = want.probs[((b * s.H + h) * s.S + i) * s.S + j];
          if (want_p == 0.0f) continue;
          const int64_t g = h / hpg;
          const float* q = qkv.data() + (i * s.B + b) * width + (g * (hpg + 2) + h % hpg) * s.Dh;
          const float* k = qkv.data() + (j * s.B + b) * width + (g * (hpg + 2) + hpg) * s.Dh;
          double dot = 0.0;
          for (int64_t d = 0; d < s.Dh; ++d) dot += double(q[d]) * k[d];
          const double p = std::exp(dot * opt.scale - l);
          ASSERT_NEAR(p, want_p, 1e-5 * std::max(1.0, double(want_p)));
        }
      }
}

// d(sum(w * out))/d qkv by central differences of the reference forward, against the flash
// backward with dout = w. Covers GQA, causal + holes and dropout (a fixed mask).
TEST(FlashAttention, BackwardMatchesFiniteDifferences) {
  for (const Case& c : {Case{{6, 2, 4, 2, 4}, true, true, 0.3f, 0.0f},
                        Case{{5, 1, 2, 1, 3}, false, false, 0.0f, 0.9f},
                        Case{{9, 2, 3, 1, 4}, false, true, 0.2f, 0.0f}}) {
    const AttentionShape& s = c.shape;
    const auto mask = make_key_mask(s, 3);
    const AttentionOptions opt = options_for(c, mask);
    const auto qkv = random_vector(qkv_size(s), 4), w = random_vector(out_size(s), 5);
    const Result got = run_flash(s, opt, qkv, w);
    EXPECT_TRUE(testing::check_gradient(
        qkv, got.dqkv,
        [&](const std::vector<float>& x) {
          std::vector<float> out(out_size(s)), lse(lse_size(s));
          cpu::flash_attention_forward(s, opt, x.data(), out.data(), lse.data());
          return testing::weighted_sum(w, out);
        },
        1e-2f, 2e-3, int(qkv.size())));
  }
}

// Soft-capped scores (Gemma 2's attn_logit_softcapping): the flash forward and backward against
// the naive reference (forward and its backward through 1 - tanh^2), small caps that bite, with
// GQA, causal + holes, dropout and several tiles; the backward against finite differences; and
// the KV-cached decoder against the flash forward.
TEST(FlashAttention, SoftcapMatchesReferenceAndFiniteDifferences) {
  uint32_t seed = 40;
  for (const Case& c : {Case{{9, 3, 4, 2, 8}, false, true, 0.0f, 0.3f},
                        Case{{70, 2, 3, 1, 16}, true, true, 0.2f, 0.0f},
                        Case{{300, 1, 2, 1, 8}, true, false, 0.0f, 0.0f}}) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(::testing::Message() << "S=" << s.S << " causal=" << c.causal);
    const auto mask = make_key_mask(s, seed);
    AttentionOptions opt = options_for(c, mask);
    opt.softcap = 1.5f;
    const auto qkv = random_vector(qkv_size(s), seed++, -3.0f, 3.0f);
    const auto dout = random_vector(out_size(s), seed++);
    const Result got = run_flash(s, opt, qkv, dout);
    std::vector<float> out(out_size(s)), probs(probs_size(s)), dqkv(qkv_size(s));
    ref::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
    ref::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
    EXPECT_TRUE(all_close(got.out, out, 1e-5));
    EXPECT_TRUE(all_close(got.dqkv, dqkv, 1e-5));
    // The cap changes the result (it bites at these scores).
    AttentionOptions plain = opt;
    plain.softcap = 0.0f;
    EXPECT_FALSE(all_close(run_flash(s, plain, qkv, dout).out, got.out, 1e-3));
  }
  const Case c{{6, 2, 4, 2, 4}, true, true, 0.3f, 0.0f};
  const auto mask = make_key_mask(c.shape, 3);
  AttentionOptions opt = options_for(c, mask);
  opt.softcap = 0.8f;
  const auto qkv = random_vector(qkv_size(c.shape), 4, -2.0f, 2.0f);
  const auto w = random_vector(out_size(c.shape), 5);
  const Result got = run_flash(c.shape, opt, qkv, w);
  EXPECT_TRUE(testing::check_gradient(
      qkv, got.dqkv,
      [&](const std::vector<float>& x) {
        std::vector<float> o(out_size(c.shape)), lse(lse_size(c.shape));
        cpu::flash_attention_forward(c.shape, opt, x.data(), o.data(), lse.data());
        return testing::weighted_sum(w, o);
      },
      1e-2f, 2e-3, int(qkv.size())));
}

// Tensor/data-parallel pieces (head_offset / total_heads / batch_offset) reproduce their slice
// of the full run, dropout masks included.
TEST(FlashAttention, ShardedHeadsAndBatchMatchFullRun) {
  const AttentionShape full{11, 3, 4, 2, 6};
  const Case c{full, true, true, 0.25f, 0.0f};
  const auto mask = make_key_mask(full, 6);
  const AttentionOptions opt = options_for(c, mask);
  const auto qkv = random_vector(qkv_size(full), 7), dout = random_vector(out_size(full), 8);
  const Result whole = run_flash(full, opt, qkv, dout);
  const int64_t hpg = full.H / full.G, group_width = (hpg + 2) * full.Dh;
  for (int64_t b = 0; b < full.B; ++b) {
    for (int64_t g = 0; g < full.G; ++g) {
      const AttentionShape local{full.S, 1, hpg, 1, full.Dh, g * hpg, full.H, b};
      std::vector<float> lqkv(qkv_size(local)), ldout(out_size(local));
      for (int64_t t = 0; t < full.S; ++t) {
        const int64_t src = ((t * full.B + b) * full.G + g) * group_width;
        std::copy_n(qkv.begin() + src, group_width, lqkv.begin() + t * group_width);
        const int64_t osrc = ((t * full.B + b) * full.H + g * hpg) * full.Dh;
        std::copy_n(dout.begin() + osrc, hpg * full.Dh, ldout.begin() + t * hpg * full.Dh);
      }
      AttentionOptions lopt = opt;
      lopt.key_mask = mask.data() + b * full.S;
      const Result part = run_flash(local, lopt, lqkv, ldout);
      for (int64_t t = 0; t < full.S; ++t) {
        for (int64_t e = 0; e < hpg * full.Dh; ++e)
          ASSERT_FLOAT_EQ(part.out[t * hpg * full.Dh + e],
                          whole.out[((t * full.B + b) * full.H + g * hpg) * full.Dh + e]);
        for (int64_t e = 0; e < group_width; ++e)
          ASSERT_FLOAT_EQ(part.dqkv[t * group_width + e],
                          whole.dqkv[((t * full.B + b) * full.G + g) * group_width + e]);
      }
    }
  }
}

TEST(FlashAttention, IdenticalForAnyThreadCount) {
  const Case c{{67, 3, 4, 2, 16}, true, true, 0.1f, 0.0f};
  const auto mask = make_key_mask(c.shape, 9);
  const AttentionOptions opt = options_for(c, mask);
  const auto qkv = random_vector(qkv_size(c.shape), 10);
  const auto dout = random_vector(out_size(c.shape), 11);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = run_flash(c.shape, opt, qkv, dout);
  for (int threads : {2, 3}) {
    omp_set_num_threads(threads);
    const Result many = run_flash(c.shape, opt, qkv, dout);
    EXPECT_EQ(many.out, one.out) << threads;
    EXPECT_EQ(many.lse, one.lse) << threads;
    EXPECT_EQ(many.dqkv, one.dqkv) << threads;
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace megatron::kernels
