#pragma once
// Shared by the decoder model tests (test_gpt_model, test_moe_model, test_recompute_models): a
// micro-batch of random token ids and labels below `vocab`, from mt19937(seed); and by the logits
// tests against other frameworks (test_hf_logits, test_megatron_logits): sequences as the model
// takes them, and the model's logits in their order.
#include <cstdint>
#include <random>
#include <vector>

#include "models/model.h"

namespace megatron::models::testing {

inline MicroBatch random_decoder_batch(int64_t S, int64_t B, int64_t vocab, uint32_t seed,
                                       MicroBatchInfo info) {
  std::mt19937 rng(seed);
  MicroBatch mb;
  mb.tokens = Tensor::empty({S, B}, DType::I32);
  mb.labels = Tensor::empty({S, B}, DType::I32);
  for (int64_t i = 0; i < S * B; ++i) {
    mb.tokens.data<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
    mb.labels.data<int32_t>()[i] = static_cast<int32_t>(rng() % vocab);
  }
  mb.info = info;
  return mb;
}

// tokens[b][s] as the [S, B] ids the model takes, and next-token labels (the last ignored).
inline std::pair<Tensor, Tensor> next_token_batch(const std::vector<std::vector<int32_t>>& tokens) {
  const int64_t B = static_cast<int64_t>(tokens.size()), S = static_cast<int64_t>(tokens[0].size());
  Tensor tok = Tensor::empty({S, B}, DType::I32), lab = Tensor::empty({S, B}, DType::I32);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) {
      tok.data<int32_t>()[s * B + b] = tokens[b][s];
      lab.data<int32_t>()[s * B + b] = s + 1 < S ? tokens[b][s + 1] : kIgnoreIndex;
    }
  return {std::move(tok), std::move(lab)};
}

// The first `columns` of each position's logits (fp32 [S * B, V]), position by position (s, then
// b); reference(b, s, v) the other framework's value, laid out alike in *theirs.
template <typename Reference>
void paired_logits(const Tensor& logits, int64_t S, int64_t B, int64_t V, int64_t columns,
                   Reference reference, std::vector<float>* ours, std::vector<float>* theirs) {
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t v = 0; v < columns; ++v) {
        ours->push_back(logits.data<float>()[(s * B + b) * V + v]);
        theirs->push_back(reference(b, s, v));
      }
}

}  // namespace megatron::models::testing
