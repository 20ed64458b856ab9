// Masked attention beyond causal: packed sequences (segment_ids, kernels/cpu/attention.h) never
// cross a document, and rope with per-token positions restarts each document at 0 (checked
// against running every document as its own sequence); sliding windows (AttentionOptions::
// window) see only the last `window` keys. All checked against the naive reference (dropout and
// key holes included) and by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/reference/attention.h"
#include "kernels/cpu/reference/rope.h"
#include "kernels/cpu/rope.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::nan_vector;
using testing::random_vector;

int64_t width(const AttentionShape& s) { return (s.H + 2 * s.G) * s.Dh; }  // qkv per token
int64_t qkv_size(const AttentionShape& s) { return s.S * s.B * width(s); }
int64_t out_size(const AttentionShape& s) { return s.S * s.B * s.H * s.Dh; }

// Document lengths of each batch row (each row's lengths sum to S).
using Packing = std::vector<std::vector<int64_t>>;

std::vector<int32_t> segment_ids(const AttentionShape& s, const Packing& docs) {
  std::vector<int32_t> ids(s.B * s.S);
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t t = 0;
    for (size_t d = 0; d < docs[b].size(); ++d)
      for (int64_t k = 0; k < docs[b][d]; ++k) ids[b * s.S + t++] = int32_t(d);
  }
  return ids;
}

// positions [S, B]: restart at 0 for each document.
std::vector<int32_t> positions(const AttentionShape& s, const Packing& docs) {
  std::vector<int32_t> pos(s.S * s.B);
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t t = 0;
    for (int64_t len : docs[b])
      for (int64_t k = 0; k < len; ++k) pos[(t++) * s.B + b] = int32_t(k);
  }
  return pos;
}

// Rows [t0, t0 + len) of batch row b of a [S, B, width] buffer, as a [len, 1, width] buffer.
std::vector<float> slice(const std::vector<float>& x, const AttentionShape& s, int64_t w, int64_t b,
                         int64_t t0, int64_t len) {
  std::vector<float> y(len * w);
  for (int64_t t = 0; t < len; ++t)
    for (int64_t k = 0; k < w; ++k) y[t * w + k] = x[((t0 + t) * s.B + b) * w + k];
  return y;
}

struct Outputs {
  std::vector<float> out, dqkv;
};

Outputs run(bool flash, const AttentionShape& s, const AttentionOptions& opt,
            const std::vector<float>& qkv, const std::vector<float>& dout) {
  Outputs r{nan_vector(out_size(s)), nan_vector(qkv_size(s))};
  if (flash) {
    std::vector<float> lse(s.B * s.H * s.S);
    cpu::flash_attention_forward(s, opt, qkv.data(), r.out.data(), lse.data());
    cpu::flash_attention_backward(s, opt, qkv.data(), r.out.data(), lse.data(), dout.data(),
                                  r.dqkv.data());
  } else {
    std::vector<float> probs(s.B * s.H * s.S * s.S);
    cpu::attention_forward(s, opt, qkv.data(), r.out.data(), probs.data());
    cpu::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), r.dqkv.data());
  }
  return r;
}

AttentionOptions plain_options(const AttentionShape& s, bool causal) {
  AttentionOptions opt{};
  opt.scale = 1.0f / std::sqrt(float(s.Dh));
  opt.causal = causal;
  return opt;
}

// Packed attention (forward and backward) equals each document attended on its own.
TEST(PackedAttention, EqualsEachDocumentAlone) {
  const AttentionShape s{19, 2, 4, 2, 8};
  const Packing docs = {{5, 1, 9, 4}, {19}};
  const auto ids = segment_ids(s, docs);
  for (bool flash : {false, true}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "flash=" << flash << " causal=" << causal);
      AttentionOptions opt = plain_options(s, causal);
      opt.segment_ids = ids.data();
      const auto qkv = random_vector(qkv_size(s), 11, -2.0f, 2.0f);
      const auto dout = random_vector(out_size(s), 12);
      const Outputs packed = run(flash, s, opt, qkv, dout);
      for (int64_t b = 0; b < s.B; ++b) {
        int64_t t0 = 0;
        for (int64_t len : docs[b]) {
          const AttentionShape one{len, 1, s.H, s.G, s.Dh};
          const Outputs alone =
              run(flash, one, plain_options(one, causal), slice(qkv, s, width(s), b, t0, len),
                  slice(dout, s, s.H * s.Dh, b, t0, len));
          EXPECT_TRUE(all_close(slice(packed.out, s, s.H * s.Dh, b, t0, len), alone.out, 1e-5));
          EXPECT_TRUE(all_close(slice(packed.dqkv, s, width(s), b, t0, len), alone.dqkv, 1e-5));
          t0 += len;
        }
      }
    }
  }
}

// With dropout and key holes on top of the segments, both kernels match the naive reference.
TEST(PackedAttention, MatchesReferenceWithDropoutAndHoles) {
  const AttentionShape s{70, 2, 3, 1, 8, 0, 0, 2};
  const Packing docs = {{30, 1, 39}, {64, 6}};
  const auto ids = segment_ids(s, docs);
  std::vector<uint8_t> key_mask(s.B * s.S, 1);
  for (int64_t j = 0; j < s.B * s.S; j += 7) key_mask[j] = 0;
  for (bool causal : {true, false}) {
    AttentionOptions opt = plain_options(s, causal);
    opt.segment_ids = ids.data();
    opt.key_mask = key_mask.data();
    opt.dropout_p = 0.2f;
    opt.seed = 77;
    opt.stream = 3;
    const auto qkv = random_vector(qkv_size(s), 21, -2.0f, 2.0f);
    const auto dout = random_vector(out_size(s), 22);
    std::vector<float> out(out_size(s)), probs(s.B * s.H * s.S * s.S), dqkv(qkv_size(s));
    ref::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
    ref::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
    for (bool flash : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "flash=" << flash << " causal=" << causal);
      const Outputs got = run(flash, s, opt, qkv, dout);
      EXPECT_TRUE(all_close(got.out, out, 1e-5));
      EXPECT_TRUE(all_close(got.dqkv, dqkv, 1e-5));
    }
  }
}

// Both kernels' qkv gradient of sum(w * out) equals finite differences of the reference forward.
void expect_backward_matches_finite_differences(const AttentionShape& s,
                                                const AttentionOptions& opt, uint32_t seed) {
  for (bool flash : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "flash=" << flash);
    const auto qkv = random_vector(qkv_size(s), seed), w = random_vector(out_size(s), seed + 1);
    const Outputs got = run(flash, s, opt, qkv, w);
    EXPECT_TRUE(testing::check_gradient(
        qkv, got.dqkv,
        [&](const std::vector<float>& x) {
          std::vector<float> out(out_size(s)), probs(s.B * s.H * s.S * s.S);
          ref::attention_forward(s, opt, x.data(), out.data(), probs.data());
          return testing::weighted_sum(w, out);
        },
        1e-2f, 2e-3, int(qkv.size())));
  }
}

TEST(PackedAttention, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{9, 2, 2, 1, 4};
  const auto ids = segment_ids(s, {{4, 5}, {2, 3, 4}});
  AttentionOptions opt = plain_options(s, true);
  opt.segment_ids = ids.data();
  expect_backward_matches_finite_differences(s, opt, 31);
}

// Sliding windows (with segments, key holes and dropout on top) in both kernels equal the naive
// reference, over sequences longer than a flash key tile (whole tiles before a window are
// skipped); a window covering the sequence changes nothing.
TEST(SlidingWindowAttention, MatchesReferenceWithDropoutHolesAndSegments) {
  const AttentionShape s{200, 2, 2, 1, 8, 0, 0, 1};
  const Packing docs = {{150, 50}, {200}};
  const auto ids = segment_ids(s, docs);
  std::vector<uint8_t> key_mask(s.B * s.S, 1);
  for (int64_t j = 3; j < s.B * s.S; j += 11) key_mask[j] = 0;
  const auto qkv = random_vector(qkv_size(s), 51, -2.0f, 2.0f);
  const auto dout = random_vector(out_size(s), 52);
  for (int64_t window : {1, 7, 64, 130}) {
    AttentionOptions opt = plain_options(s, true);
    opt.window = window;
    opt.segment_ids = ids.data();
    opt.key_mask = key_mask.data();
    opt.dropout_p = 0.1f;
    opt.seed = 5;
    std::vector<float> out(out_size(s)), probs(s.B * s.H * s.S * s.S), dqkv(qkv_size(s));
    ref::attention_forward(s, opt, qkv.data(), out.data(), probs.data());
    ref::attention_backward(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data());
    for (bool flash : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "window=" << window << " flash=" << flash);
      const Outputs got = run(flash, s, opt, qkv, dout);
      EXPECT_TRUE(all_close(got.out, out, 1e-5));
      EXPECT_TRUE(all_close(got.dqkv, dqkv, 1e-5));
    }
  }
  for (bool flash : {false, true}) {
    AttentionOptions opt = plain_options(s, true), wide = opt;
    wide.window = s.S;
    EXPECT_EQ(run(flash, s, wide, qkv, dout).out, run(flash, s, opt, qkv, dout).out) << flash;
  }
  AttentionOptions bidirectional = plain_options(s, false);
  bidirectional.window = 4;  // a window needs causal attention
  EXPECT_THROW(run(false, s, bidirectional, qkv, dout), megatron::Error);
}

TEST(SlidingWindowAttention, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{9, 2, 2, 1, 4};
  AttentionOptions opt = plain_options(s, true);
  opt.window = 3;
  expect_backward_matches_finite_differences(s, opt, 61);
}

// Rope at per-document positions equals rope of each document alone (from position 0), and the
// reference with the same positions; backward undoes forward.
TEST(PackedRope, PositionsRestartPerDocument) {
  const AttentionShape s{13, 2, 4, 2, 8};
  const Packing docs = {{6, 7}, {1, 2, 10}};
  const auto pos = positions(s, docs);
  const auto x = random_vector(qkv_size(s), 41);
  auto packed = x, want = x;
  cpu::rope_forward(s, packed.data(), 10000.0f, 0, pos.data());
  ref::rope_forward(s, want.data(), 10000.0f, 0, pos.data());
  EXPECT_TRUE(all_close(packed, want, 1e-5));
  for (int64_t b = 0; b < s.B; ++b) {
    int64_t t0 = 0;
    for (int64_t len : docs[b]) {
      const AttentionShape one{len, 1, s.H, s.G, s.Dh};
      auto alone = slice(x, s, width(s), b, t0, len);
      cpu::rope_forward(one, alone.data(), 10000.0f, 0);
      EXPECT_TRUE(all_close(slice(packed, s, width(s), b, t0, len), alone, 1e-6));
      t0 += len;
    }
  }
  cpu::rope_backward(s, packed.data(), 10000.0f, 0, pos.data());
  EXPECT_TRUE(all_close(packed, x, 1e-5));
}

}  // namespace
}  // namespace megatron::kernels
