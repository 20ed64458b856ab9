#include "megatron/training/mock_source.h"

#include <algorithm>
#include <vector>

#include "megatron/core/error.h"

namespace megatron::training {
namespace {

// SplitMix64: a counter-based generator, so sample i needs no state from samples < i.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Stream {
  uint64_t state;
  uint64_t next() { return mix(state++); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

Stream stream_for(uint64_t seed, int64_t index) {
  return Stream{mix(seed ^ mix(static_cast<uint64_t>(index)))};
}

}  // namespace

MockTokenSource::MockTokenSource(int64_t seq_length, int64_t vocab_size, uint64_t seed,
                                 int64_t samples_per_epoch)
    : seq_length_(seq_length), vocab_(vocab_size), samples_(samples_per_epoch), seed_(seed) {
  MT_INPUT_CHECK(seq_length > 0 && vocab_size > 1 && samples_per_epoch > 0,
                 "mock data: needs seq_length > 0 and vocab_size > 1 (got ", seq_length, ", ",
                 vocab_size, ")");
}

void MockTokenSource::get(int64_t index, int32_t* tokens) const {
  Stream rng = stream_for(seed_, index % samples_);
  // A motif of 3..10 tokens repeated over the window: predictable after its first occurrence.
  const int64_t period = 3 + rng.below(8);
  std::vector<int32_t> motif(static_cast<size_t>(period));
  for (auto& t : motif) t = static_cast<int32_t>(rng.below(vocab_));
  for (int64_t s = 0; s <= seq_length_; ++s) tokens[s] = motif[static_cast<size_t>(s % period)];
}

MockBertSource::MockBertSource(int64_t seq_length, int64_t vocab_size, uint64_t seed,
                               bool binary_head, int64_t samples_per_epoch)
    : seq_length_(seq_length),
      vocab_(vocab_size),
      samples_(samples_per_epoch),
      seed_(seed),
      binary_head_(binary_head) {
  MT_INPUT_CHECK(seq_length >= 8 && vocab_size > 16 && samples_per_epoch > 0,
                 "mock BERT data: needs seq_length >= 8 and vocab_size > 16 (got ", seq_length,
                 ", ", vocab_size, ")");
}

void MockBertSource::fill(int64_t first_sample, int64_t micro_batch_size,
                          models::MicroBatch& mb) const {
  constexpr int32_t kPad = 0, kCls = 1, kSep = 2, kMask = 3, kFirstWord = 5;
  const int64_t S = seq_length_, B = micro_batch_size;
  int32_t* tokens = ensure(mb.tokens, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* types = ensure(mb.token_types, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* labels = ensure(mb.labels, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  uint8_t* padding = ensure(mb.padding_mask, {B, S}, DType::U8, Device::CPU).data<uint8_t>();
  int32_t* nsp =
      binary_head_ ? ensure(mb.nsp_labels, {B}, DType::I32, Device::CPU).data<int32_t>() : nullptr;
  if (!binary_head_) mb.nsp_labels = Tensor();
  for (int64_t b = 0; b < B; ++b) {
    Stream rng = stream_for(seed_, (first_sample + b) % samples_);
    // Real length in [S/2, S]; segment A then B, each a run of a repeated word pair so the
    // masked words are predictable from their neighbours.
    const int64_t real = S / 2 + rng.below(S / 2 + 1);
    const int64_t len_a = 1 + rng.below(real - 4);
    const auto word = [&] {
      return static_cast<int32_t>(kFirstWord + rng.below(vocab_ - kFirstWord));
    };
    const int32_t a0 = word(), a1 = word(), b0 = word(), b1 = word();
    const int32_t swapped = static_cast<int32_t>(rng.below(2));
    for (int64_t s = 0; s < S; ++s) {
      int32_t tok = kPad, type = 0;
      if (s == 0) {
        tok = kCls;
      } else if (s <= len_a) {
        tok = (s % 2) ? a0 : a1;
      } else if (s == len_a + 1) {
        tok = kSep;
      } else if (s < real - 1) {
        tok = (s % 2) ? b0 : b1;
        type = 1;
      } else if (s == real - 1) {
        tok = kSep;
        type = 1;
      }
      int32_t label = models::kIgnoreIndex;
      const bool word_position = s > 0 && s < real - 1 && s != len_a + 1;
      if (word_position && rng.below(100) < 15) {
        label = tok;
        tok = kMask;
      }
      tokens[s * B + b] = tok;
      types[s * B + b] = type;
      labels[s * B + b] = label;
      padding[b * S + s] = s < real ? 1 : 0;
    }
    if (nsp) nsp[b] = swapped;
  }
}

}  // namespace megatron::training
