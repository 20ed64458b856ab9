// Attention sinks (kernels/cpu/attention_sinks.h) around the CPU flash kernels: the output and
// the gradients of qkv and of the sinks equal the naive reference with the sink in each row's
// denominator (kernels/cpu/reference/attention.h), under causal and bidirectional masks, key
// holes and fully masked rows, GQA, sliding windows, soft-capping and dropout; the backward
// against finite differences; and the KV-cached decoder with sinks against the full forward.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention_sinks.h"
#include "kernels/cpu/flash_attention.h"
#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/reference/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

int64_t qkv_size(const AttentionShape& s) { return s.S * s.B * (s.H + 2 * s.G) * s.Dh; }
int64_t out_size(const AttentionShape& s) { return s.S * s.B * s.H * s.Dh; }

struct Case {
  AttentionShape shape;
  bool causal, holes;
  int64_t window;
  float softcap, dropout;
};

// Key holes (1 in 4), and the last batch row fully masked when B > 1.
std::vector<uint8_t> key_mask(const AttentionShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> mask(s.B * s.S);
  for (auto& m : mask) m = rng() % 4 != 0;
  if (s.B > 1)
    for (int64_t j = 0; j < s.S; ++j) mask[(s.B - 1) * s.S + j] = 0;
  return mask;
}

AttentionOptions options_for(const Case& c, const std::vector<uint8_t>& mask) {
  AttentionOptions o{};
  o.scale = 1.0f / std::sqrt(float(c.shape.Dh));
  o.causal = c.causal;
  o.key_mask = c.holes ? mask.data() : nullptr;
  o.window = c.window;
  o.softcap = c.softcap;
  o.dropout_p = c.dropout;
  o.seed = 77;
  o.stream = 3;
  return o;
}

struct Result {
  std::vector<float> out, dqkv, dsinks;
};

// Flash forward, the sinks' scaling; the sinks' backward, then flash backward.
Result run_sinks(const AttentionShape& s, const AttentionOptions& opt,
                 const std::vector<float>& qkv, const std::vector<float>& sinks,
                 const std::vector<float>& dout) {
  Result r{std::vector<float>(out_size(s)), std::vector<float>(qkv_size(s)),
           std::vector<float>(s.H, 0.0f)};
  std::vector<float> lse(s.B * s.H * s.S), dscaled(out_size(s));
  cpu::flash_attention_forward(s, opt, qkv.data(), r.out.data(), lse.data());
  cpu::attention_sinks_forward(s, sinks.data(), lse.data(), r.out.data());
  cpu::attention_sinks_backward(s, sinks.data(), lse.data(), r.out.data(), dout.data(),
                                dscaled.data(), r.dsinks.data());
  cpu::flash_attention_backward(s, opt, qkv.data(), r.out.data(), lse.data(), dscaled.data(),
                                r.dqkv.data());
  return r;
}

TEST(AttentionSinks, FlashWithSinksMatchesTheReference) {
  uint32_t seed = 11;
  for (const Case& c : {Case{{9, 3, 4, 2, 8}, true, true, 0, 0.0f, 0.0f},
                        Case{{13, 2, 6, 3, 4}, false, true, 0, 0.0f, 0.0f},
                        Case{{70, 1, 4, 1, 16}, true, false, 9, 0.0f, 0.0f},
                        Case{{33, 2, 2, 2, 8}, true, true, 0, 1.5f, 0.2f},
                        Case{{140, 1, 2, 1, 8}, true, false, 0, 0.0f, 0.0f}}) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE(::testing::Message() << "S=" << s.S << " causal=" << c.causal
                                      << " window=" << c.window << " softcap=" << c.softcap);
    const auto mask = key_mask(s, seed);
    const AttentionOptions opt = options_for(c, mask);
    const auto qkv = random_vector(qkv_size(s), seed++, -2.0f, 2.0f);
    const auto sinks = random_vector(s.H, seed++, -2.0f, 3.0f);
    const auto dout = random_vector(out_size(s), seed++);
    const Result got = run_sinks(s, opt, qkv, sinks, dout);
    std::vector<float> out(out_size(s)), probs(s.B * s.H * s.S * s.S), dqkv(qkv_size(s)),
        dsinks(s.H);
    ref::attention_forward_with_sinks(s, opt, qkv.data(), sinks.data(), out.data(), probs.data());
    ref::attention_backward_with_sinks(s, opt, qkv.data(), probs.data(), dout.data(), dqkv.data(),
                                       dsinks.data());
    EXPECT_TRUE(all_close(got.out, out, 1e-5));
    EXPECT_TRUE(all_close(got.dqkv, dqkv, 1e-5));
    EXPECT_TRUE(all_close(got.dsinks, dsinks, 1e-4));
    // The sinks change the result.
    std::vector<float> plain(out_size(s)), lse(s.B * s.H * s.S);
    cpu::flash_attention_forward(s, opt, qkv.data(), plain.data(), lse.data());
    EXPECT_FALSE(all_close(plain, got.out, 1e-3));
  }
}

// The composite's gradients of qkv and of the sinks against central differences.
TEST(AttentionSinks, GradientsMatchFiniteDifferences) {
  const Case c{{7, 2, 4, 2, 4}, true, true, 0, 0.0f, 0.0f};
  const AttentionShape& s = c.shape;
  const auto mask = key_mask(s, 5);
  const AttentionOptions opt = options_for(c, mask);
  const auto qkv = random_vector(qkv_size(s), 6, -1.5f, 1.5f);
  const auto sinks = random_vector(s.H, 7, -1.0f, 1.0f);
  const auto w = random_vector(out_size(s), 8);
  const Result got = run_sinks(s, opt, qkv, sinks, w);
  auto loss = [&](const std::vector<float>& x, const std::vector<float>& sk) {
    std::vector<float> o(out_size(s)), lse(s.B * s.H * s.S);
    cpu::flash_attention_forward(s, opt, x.data(), o.data(), lse.data());
    cpu::attention_sinks_forward(s, sk.data(), lse.data(), o.data());
    return testing::weighted_sum(w, o);
  };
  EXPECT_TRUE(testing::check_gradient(
      qkv, got.dqkv, [&](const std::vector<float>& x) { return loss(x, sinks); }, 1e-2f, 2e-3,
      int(qkv.size())));
  EXPECT_TRUE(testing::check_gradient(
      sinks, got.dsinks, [&](const std::vector<float>& sk) { return loss(qkv, sk); }, 1e-2f, 2e-3,
      int(sinks.size())));
}

// Decoding through the KV cache with sinks, one position and three at a time, gives the full
// forward's rows (flash + sinks); without the sinks it does not.
TEST(AttentionSinks, KvCacheDecodingMatchesTheFullForward) {
  for (int64_t window : {int64_t{0}, int64_t{4}}) {
    const AttentionShape full{10, 2, 4, 2, 8};
    const int64_t S = full.S, B = full.B, H = full.H, G = full.G, Dh = full.Dh;
    const int64_t row = B * G * (H / G + 2) * Dh, out_row = B * H * Dh;
    const auto qkv = random_vector(qkv_size(full), 21, -2.0f, 2.0f);
    const auto sinks = random_vector(H, 22, -1.0f, 2.0f);
    AttentionOptions opt{};
    opt.scale = 1.0f / std::sqrt(float(Dh));
    opt.causal = true;
    opt.window = window;
    std::vector<float> want(out_size(full)), lse(B * H * S);
    cpu::flash_attention_forward(full, opt, qkv.data(), want.data(), lse.data());
    cpu::attention_sinks_forward(full, sinks.data(), lse.data(), want.data());
    for (int64_t chunk : {int64_t{1}, int64_t{3}}) {
      std::vector<float> keys(B * G * S * Dh), values(B * G * S * Dh), got(out_size(full));
      for (int64_t past = 0; past < S; past += chunk) {
        const AttentionShape step{std::min(chunk, S - past), B, H, G, Dh};
        cpu::kv_cache_attention(step, opt.scale, qkv.data() + past * row, keys.data(),
                                values.data(), past, S, got.data() + past * out_row, window, 0.0f,
                                sinks.data());
      }
      EXPECT_TRUE(all_close(got, want, 1e-5)) << "chunk " << chunk << " window " << window;
    }
  }
}

}  // namespace
}  // namespace megatron::kernels
