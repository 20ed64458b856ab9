#pragma once
// Helpers shared by the BERT model tests (tests/unit/test_bert_*.cpp): a tiny BERT spec, random
// micro-batches with padding, segment B and MLM/NSP labels, and perturbed biases and norms.
#include <cstdint>
#include <random>

#include "models/bert/bert_model.h"

namespace megatron::models::testing {

inline constexpr int64_t kVocab = 29, kPaddedVocab = 32;

inline BertSpec tiny_spec(float dropout = 0.0f, bool binary_head = true) {
  BertSpec s =
      make_bert_spec(/*layers*/ 2, /*hidden*/ 16, /*heads*/ 4, /*ffn*/ 24, /*seq*/ 8,
                     /*max_positions*/ 10, kVocab, kPaddedVocab, binary_head, dropout, dropout);
  s.transformer.init_std = 0.2f;  // large enough that every path carries signal
  s.transformer.norm_eps = 1e-5f;
  return s;
}

// Sample b has S - 2 * (b % 3) real tokens (sample 0 is unpadded); the second half of each
// sample's real tokens is segment B; about half the real positions carry an MLM label; ids
// below `vocab`.
inline MicroBatch random_batch(int64_t S, int64_t B, uint32_t seed, int64_t vocab = kVocab) {
  std::mt19937 rng(seed);
  MicroBatch mb;
  mb.tokens = Tensor::empty({S, B}, DType::I32);
  mb.labels = Tensor::empty({S, B}, DType::I32);
  mb.token_types = Tensor::empty({S, B}, DType::I32);
  mb.padding_mask = Tensor::empty({B, S}, DType::U8);
  mb.nsp_labels = Tensor::empty({B}, DType::I32);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = S - 2 * (b % 3);
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = s * B + b;
      const bool real = s < len;
      mb.tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
      mb.labels.data<int32_t>()[i] =
          real && rng() % 2 == 0 ? static_cast<int32_t>(rng() % vocab) : kIgnoreIndex;
      mb.token_types.data<int32_t>()[i] = real && s >= len / 2 ? 1 : 0;
      mb.padding_mask.data<uint8_t>()[b * S + s] = real ? 1 : 0;
    }
    mb.labels.data<int32_t>()[b] = static_cast<int32_t>(rng() % vocab);  // position 0 counts
    mb.nsp_labels.data<int32_t>()[b] = static_cast<int32_t>(rng() % 2);
  }
  mb.info = MicroBatchInfo{3, 5, true};
  return mb;
}

// Biases and norm shifts start at zero and norm scales at one; perturb them so every path
// (and its gradient) is exercised.
inline void perturb_biases(ParamStore& store, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  for (Parameter* p : store.params())
    if (p->init.kind != ParamInit::Kind::Normal)
      for (int64_t i = 0; i < p->weight.numel(); ++i) p->weight.data<float>()[i] += dist(rng);
}

}  // namespace megatron::models::testing
