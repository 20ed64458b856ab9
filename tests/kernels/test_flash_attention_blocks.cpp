// Context parallelism's block attention (kernels/cpu/flash_attention.h): the global sequence cut
// into 2 * cp chunks, each rank holding chunks r and 2cp - 1 - r (the load-balanced order), its
// queries attending to every rank's packed keys/values block by block and merged by lse. Every
// rank's rows must equal the whole-sequence flash attention's (masks, windows, documents and
// dropout use global positions), and the key/value gradients summed over ranks the whole run's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/flash_attention.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

struct CpCase {
  AttentionShape shape;  // S is the global sequence
  int64_t cp;
  bool causal;
  int64_t window;
  bool padding, documents;
  float dropout;
};

// Rows of a [S, B, width] tensor at the given global positions, in that order.
std::vector<float> take_rows(const std::vector<float>& x, const std::vector<int64_t>& pos,
                             int64_t width) {
  std::vector<float> out;
  for (int64_t p : pos) out.insert(out.end(), x.begin() + p * width, x.begin() + (p + 1) * width);
  return out;
}

// The fused qkv rows [rows, B, G, H/G + 2, Dh] -> packed [rows, B, G, 2, Dh].
std::vector<float> pack_kv(const std::vector<float>& qkv, const AttentionShape& s, int64_t rows) {
  const int64_t hpg = s.H / s.G;
  std::vector<float> kv;
  for (int64_t i = 0; i < rows * s.B; ++i)
    for (int64_t g = 0; g < s.G; ++g) {
      const float* src = qkv.data() + (i * s.G + g) * (hpg + 2) * s.Dh + hpg * s.Dh;
      kv.insert(kv.end(), src, src + 2 * s.Dh);
    }
  return kv;
}

struct RankRows {
  std::vector<int64_t> pos;  // global positions of the local rows
  std::vector<AttentionBlock> chunks;  // as q blocks (q_rows set; k fields unused)
};

RankRows rank_rows(int64_t S, int64_t cp, int64_t r) {
  const int64_t C = S / (2 * cp);
  RankRows rr;
  for (int64_t c : {r, 2 * cp - 1 - r}) {
    rr.chunks.push_back(AttentionBlock{c * C, C, 0, 0, true});
    for (int64_t i = 0; i < C; ++i) rr.pos.push_back(c * C + i);
  }
  return rr;
}

AttentionOptions options_for(const CpCase& c, const std::vector<uint8_t>& mask,
                             const std::vector<int32_t>& docs) {
  AttentionOptions opt{};
  opt.scale = 1.0f / std::sqrt(float(c.shape.Dh));
  opt.causal = c.causal;
  opt.window = c.window;
  opt.key_mask = c.padding ? mask.data() : nullptr;
  opt.segment_ids = c.documents ? docs.data() : nullptr;
  opt.dropout_p = c.dropout;
  opt.seed = 99;
  opt.stream = 3;
  return opt;
}

void check_case(const CpCase& c, uint32_t seed) {
  const AttentionShape& s = c.shape;
  const int64_t S = s.S, B = s.B, H = s.H, G = s.G, Dh = s.Dh, C = S / (2 * c.cp);
  const int64_t qkv_w = B * (H + 2 * G) * Dh, out_w = B * H * Dh, kv_w = B * 2 * G * Dh;
  std::mt19937 rng(seed);
  std::vector<uint8_t> mask(B * S);
  for (auto& m : mask) m = rng() % 5 != 0;
  std::vector<int32_t> docs(B * S);  // documents of random lengths, crossing chunk borders
  for (int64_t b = 0; b < B; ++b) {
    int32_t d = 0;
    for (int64_t j = 0; j < S; ++j) {
      if (j > 0 && rng() % 7 == 0) ++d;
      docs[b * S + j] = d;
    }
  }
  const AttentionOptions opt = options_for(c, mask, docs);
  const auto qkv = random_vector(S * qkv_w, seed + 1, -2.0f, 2.0f);
  const auto dout = random_vector(S * out_w, seed + 2);
  std::vector<float> out(S * out_w), lse(B * H * S), dqkv(S * qkv_w);
  cpu::flash_attention_forward(s, opt, qkv.data(), out.data(), lse.data());
  cpu::flash_attention_backward(s, opt, qkv.data(), out.data(), lse.data(), dout.data(),
                                dqkv.data());

  std::vector<std::vector<float>> kv(c.cp);
  std::vector<RankRows> rows(c.cp);
  for (int64_t r = 0; r < c.cp; ++r) {
    rows[r] = rank_rows(S, c.cp, r);
    kv[r] = pack_kv(take_rows(qkv, rows[r].pos, qkv_w), s, 2 * C);
  }
  std::vector<float> dkv_sum(c.cp * 2 * C * kv_w, 0.0f);
  for (int64_t r = 0; r < c.cp; ++r) {
    SCOPED_TRACE(::testing::Message() << "rank " << r);
    const auto q = take_rows(qkv, rows[r].pos, qkv_w);
    std::vector<float> acc(2 * C * out_w, 0.0f), acc_lse(B * H * 2 * C, -INFINITY);
    std::vector<float> blk(C * out_w), blk_lse(B * H * C);
    auto each_block = [&](auto&& fn) {
      for (int64_t qc = 0; qc < 2; ++qc)
        for (int64_t src = 0; src < c.cp; ++src)
          for (int64_t kc = 0; kc < 2; ++kc) {
            const AttentionBlock b{rows[r].chunks[qc].q_start, C,
                                   rows[src].chunks[kc].q_start, C, true};
            if (block_visible(opt, b)) fn(qc, src, kc, b);
          }
    };
    each_block([&](int64_t qc, int64_t src, int64_t kc, const AttentionBlock& b) {
      cpu::flash_attention_block_forward(s, opt, b, q.data() + qc * C * qkv_w,
                                         kv[src].data() + kc * C * kv_w, blk.data(),
                                         blk_lse.data());
      cpu::flash_attention_merge(C, B, H, Dh, blk.data(), blk_lse.data(),
                                 acc.data() + qc * C * out_w, acc_lse.data() + qc * C, 2 * C);
    });
    EXPECT_TRUE(all_close(acc, take_rows(out, rows[r].pos, out_w), 2e-5));
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < 2 * C; ++i) {
        const float want = lse[bh * S + rows[r].pos[i]], got = acc_lse[bh * 2 * C + i];
        if (std::isinf(want))
          EXPECT_TRUE(std::isinf(got) && got < 0) << "row " << i;
        else
          EXPECT_NEAR(got, want, 1e-4f * std::max(1.0f, std::abs(want))) << "row " << i;
      }
    // Backward with the merged rows, as a rank does: dq here, dkv to the key's owner.
    const auto d_o = take_rows(dout, rows[r].pos, out_w);
    std::vector<float> dq(2 * C * qkv_w, 0.0f), chunk_lse(B * H * C);
    each_block([&](int64_t qc, int64_t src, int64_t kc, const AttentionBlock& b) {
      for (int64_t bh = 0; bh < B * H; ++bh)
        std::copy_n(acc_lse.data() + bh * 2 * C + qc * C, C, chunk_lse.data() + bh * C);
      cpu::flash_attention_block_backward(
          s, opt, b, q.data() + qc * C * qkv_w, kv[src].data() + kc * C * kv_w,
          acc.data() + qc * C * out_w, chunk_lse.data(), d_o.data() + qc * C * out_w,
          dq.data() + qc * C * qkv_w, dkv_sum.data() + (src * 2 + kc) * C * kv_w);
    });
    // The query slots of dq are this rank's rows of the whole run's dqkv.
    const auto want_dq = take_rows(dqkv, rows[r].pos, qkv_w);
    const int64_t hpg = H / G;
    std::vector<float> got_q, want_q;
    for (int64_t i = 0; i < 2 * C * B * G; ++i)
      for (int64_t k = 0; k < hpg * Dh; ++k) {
        got_q.push_back(dq[i * (hpg + 2) * Dh + k]);
        want_q.push_back(want_dq[i * (hpg + 2) * Dh + k]);
      }
    EXPECT_TRUE(all_close(got_q, want_q, 2e-5));
  }
  std::vector<float> want_dkv;
  for (int64_t r = 0; r < c.cp; ++r) {
    const auto part = pack_kv(take_rows(dqkv, rows[r].pos, qkv_w), s, 2 * C);
    want_dkv.insert(want_dkv.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(all_close(dkv_sum, want_dkv, 2e-5));
}

TEST(FlashAttentionBlocks, ComposeTheWholeSequence) {
  const CpCase cases[] = {
      {{16, 2, 2, 2, 8}, 2, true, 0, false, false, 0.0f},
      {{24, 1, 4, 2, 8}, 3, true, 0, false, false, 0.0f},     // GQA, odd cp
      {{32, 2, 2, 1, 16}, 2, false, 0, true, false, 0.0f},    // bidirectional, key holes
      {{48, 1, 2, 2, 8}, 2, true, 5, false, false, 0.0f},     // sliding window (skips blocks)
      {{40, 2, 2, 2, 8}, 2, true, 0, false, true, 0.0f},      // packed documents
      {{32, 2, 4, 2, 8, 4, 12, 6}, 4, true, 0, false, false, 0.3f},  // dropout, tp/dp offsets
      {{256, 1, 2, 1, 16}, 2, true, 0, false, true, 0.1f},    // several row/key tiles per chunk
      {{512, 1, 2, 2, 8}, 2, true, 100, true, true, 0.2f},
      {{1200, 1, 2, 1, 8}, 2, true, 0, false, false, 0.0f},  // chunks of 300: two tiles each
  };
  uint32_t seed = 7;
  for (const CpCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "S=" << c.shape.S << " cp=" << c.cp << " causal="
                                      << c.causal << " window=" << c.window
                                      << " docs=" << c.documents << " p=" << c.dropout);
    check_case(c, seed);
    seed += 11;
  }
}

TEST(FlashAttentionBlocks, VisibilitySkipsOnlyFullyMaskedBlocks) {
  AttentionOptions causal{};
  causal.causal = true;
  EXPECT_TRUE(block_visible(causal, {8, 4, 8, 4, true}));    // the diagonal
  EXPECT_TRUE(block_visible(causal, {8, 4, 0, 4, true}));    // keys before
  EXPECT_FALSE(block_visible(causal, {0, 4, 4, 4, true}));   // keys after every query
  EXPECT_TRUE(block_visible(causal, {0, 5, 4, 4, true}));    // the last query sees key 4
  AttentionOptions window = causal;
  window.window = 3;
  EXPECT_FALSE(block_visible(window, {8, 4, 0, 4, true}));   // keys 0..3 < 8 - 3 + 1
  EXPECT_TRUE(block_visible(window, {8, 4, 4, 4, true}));    // key 7 is in row 8's window
  AttentionOptions both{};
  EXPECT_TRUE(block_visible(both, {0, 4, 12, 4, true}));     // bidirectional: all
  EXPECT_FALSE(block_visible(both, {0, 0, 12, 4, true}));
}

TEST(FlashAttentionBlocks, BadBlocksAreRefused) {
  AttentionShape s{8, 1, 2, 2, 4};
  AttentionOptions opt{};
  opt.scale = 0.5f;
  std::vector<float> q(8 * 2 * 4 * 4), kv(8 * 2 * 2 * 4), out(8 * 2 * 4), lse(16);
  EXPECT_THROW(cpu::flash_attention_block_forward(s, opt, {6, 4, 0, 4, true}, q.data(), kv.data(),
                                                  out.data(), lse.data()),
               megatron::Error);
}

}  // namespace
}  // namespace megatron::kernels
