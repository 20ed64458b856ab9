#pragma once
// Text generation from a CausalLM: the prompt runs once (prefill), then one token per step
// through the KV cache (or, as the reference, the whole sequence recomputed every step), each
// next token chosen greedily or sampled with temperature, top-k and top-p. Every tensor-parallel
// rank sees the same gathered logits and seeds the same generator, so all ranks agree.
#include <cstdint>
#include <random>
#include <vector>

#include "megatron/inference/causal_lm.h"

namespace megatron::inference {

struct SamplingOptions {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;  // 0: greedy (the most likely token)
  int64_t top_k = 0;         // > 0: sample among the k most likely
  double top_p = 1.0;        // < 1: sample among the most likely tokens holding this mass
  uint64_t seed = 1234;
  std::vector<int32_t> stop_ids;  // generation ends after producing one of these
  bool use_cache = true;          // false: recompute the full sequence at every step
  void validate() const;          // InputError naming the option
};

struct Generation {
  std::vector<int32_t> tokens;  // the new tokens (the prompt excluded)
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;  // tokens produced after the first
};

// The next token from logits[V] (the last position's).
int32_t choose_token(const float* logits, int64_t V, const SamplingOptions& options,
                     std::mt19937_64& rng);

// prompt: token ids (BOS included as given); prompt + max_new_tokens <= lm.max_length().
Generation generate(const CausalLM& lm, const std::vector<int32_t>& prompt,
                    const SamplingOptions& options);

}  // namespace megatron::inference
