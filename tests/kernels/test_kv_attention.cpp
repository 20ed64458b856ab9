// KV-cache attention (kernels/cpu/kv_attention.h): a sequence fed in chunks of any size through
// the cache gives, row for row, the naive reference's full causal attention of the whole
// sequence; the caches hold exactly the keys and values of the qkv rows.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/kv_attention.h"
#include "kernels/cpu/reference/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

// Runs positions [past, past + step.S) of the full qkv (and writes their output rows).
void kv_cache_attention_step(const AttentionShape& step, int64_t past, int64_t capacity,
                             const std::vector<float>& qkv, std::vector<float>& keys,
                             std::vector<float>& values, std::vector<float>& out, float scale,
                             int64_t window = 0, float softcap = 0.0f) {
  const int64_t row = step.G * (step.H / step.G + 2) * step.Dh * step.B;
  const int64_t out_row = step.B * step.H * step.Dh;
  cpu::kv_cache_attention(step, scale, qkv.data() + past * row, keys.data(), values.data(), past,
                          capacity, out.data() + past * out_row, window, softcap);
}

TEST(KvCacheAttention, ChunkedDecodingMatchesFullCausalAttention) {
  const AttentionShape shapes[] = {{9, 2, 4, 2, 8}, {7, 1, 3, 3, 5}, {12, 3, 6, 1, 4}};
  for (const AttentionShape& full : shapes) {
    const int64_t S = full.S, B = full.B, H = full.H, G = full.G, Dh = full.Dh;
    const int64_t row = G * (H / G + 2) * Dh;  // one (position, sample) of qkv
    const auto qkv = random_vector(S * B * row, uint32_t(S * 31 + H));
    const AttentionOptions opt{1.0f / std::sqrt(float(Dh)), true};
    std::vector<float> want(S * B * H * Dh), probs(B * H * S * S);
    ref::attention_forward(full, opt, qkv.data(), want.data(), probs.data());
    for (int64_t chunk : {int64_t{1}, int64_t{3}, S}) {
      SCOPED_TRACE(::testing::Message()
                   << "S=" << S << " H=" << H << " G=" << G << " chunk=" << chunk);
      const int64_t capacity = S + 2;
      std::vector<float> keys(B * G * capacity * Dh), values(keys.size());
      std::vector<float> got(want.size());
      for (int64_t past = 0; past < S; past += chunk) {
        AttentionShape step = full;
        step.S = std::min(chunk, S - past);
        kv_cache_attention_step(step, past, capacity, qkv, keys, values, got, opt.scale);
      }
      EXPECT_TRUE(all_close(got, want, 2e-5));
      // The cache holds each position's key (slot H/G) and value (slot H/G + 1).
      for (int64_t s = 0; s < S; ++s)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t g = 0; g < G; ++g)
            for (int64_t d = 0; d < Dh; ++d) {
              const float* r = qkv.data() + ((s * B + b) * G + g) * (H / G + 2) * Dh;
              ASSERT_EQ(keys[((b * G + g) * capacity + s) * Dh + d], r[(H / G) * Dh + d]);
              ASSERT_EQ(values[((b * G + g) * capacity + s) * Dh + d], r[(H / G + 1) * Dh + d]);
            }
    }
  }
}

// With a sliding window each query attends only the last `window` cached positions: chunked
// decoding equals the reference's full windowed attention.
TEST(KvCacheAttention, SlidingWindowMatchesFullWindowedAttention) {
  const AttentionShape full{13, 2, 4, 2, 8};
  const int64_t S = full.S, B = full.B, H = full.H, G = full.G, Dh = full.Dh;
  const auto qkv = random_vector(S * B * G * (H / G + 2) * Dh, 5);
  for (int64_t window : {1, 4, 20}) {
    AttentionOptions opt{1.0f / std::sqrt(float(Dh)), true};
    opt.window = window;
    std::vector<float> want(S * B * H * Dh), probs(B * H * S * S);
    ref::attention_forward(full, opt, qkv.data(), want.data(), probs.data());
    for (int64_t chunk : {int64_t{1}, int64_t{5}}) {
      SCOPED_TRACE(::testing::Message() << "window=" << window << " chunk=" << chunk);
      std::vector<float> keys(B * G * S * Dh), values(keys.size()), got(want.size());
      for (int64_t past = 0; past < S; past += chunk) {
        AttentionShape step = full;
        step.S = std::min(chunk, S - past);
        kv_cache_attention_step(step, past, S, qkv, keys, values, got, opt.scale, window);
      }
      EXPECT_TRUE(all_close(got, want, 2e-5));
    }
  }
}

// Soft-capped scores (Gemma 2) with a sliding window: chunked decoding equals the reference.
TEST(KvCacheAttention, SoftcapMatchesReference) {
  const AttentionShape full{11, 2, 4, 2, 8};
  const int64_t S = full.S, B = full.B, H = full.H, G = full.G, Dh = full.Dh;
  const auto qkv = random_vector(S * B * G * (H / G + 2) * Dh, 7, -3.0f, 3.0f);
  AttentionOptions opt{1.0f / std::sqrt(float(Dh)), true};
  opt.window = 5;
  opt.softcap = 1.2f;
  std::vector<float> want(S * B * H * Dh), probs(B * H * S * S);
  ref::attention_forward(full, opt, qkv.data(), want.data(), probs.data());
  for (int64_t chunk : {int64_t{1}, int64_t{4}}) {
    std::vector<float> keys(B * G * S * Dh), values(keys.size()), got(want.size());
    for (int64_t past = 0; past < S; past += chunk) {
      AttentionShape step = full;
      step.S = std::min(chunk, S - past);
      kv_cache_attention_step(step, past, S, qkv, keys, values, got, opt.scale, opt.window,
                              opt.softcap);
    }
    EXPECT_TRUE(all_close(got, want, 2e-5)) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace megatron::kernels
