#include "megatron/inference/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "megatron/core/finite.h"

namespace megatron::inference {

void SamplingOptions::validate() const {
  MT_INPUT_CHECK(max_new_tokens >= 0, "max_new_tokens must be >= 0 (got ", max_new_tokens, ")");
  MT_INPUT_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0 (got ",
                 temperature, ")");
  MT_INPUT_CHECK(top_k >= 0, "top_k must be >= 0 (got ", top_k, ")");
  MT_INPUT_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1] (got ", top_p, ")");
}

int32_t choose_token(const float* logits, int64_t V, const SamplingOptions& o,
                     std::mt19937_64& rng) {
  if (o.temperature == 0.0)  // greedy; the lowest id wins a tie
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  // Most likely first (ties by id, so the order is deterministic).
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = ids.size();
  if (o.top_k > 0) keep = std::min(keep, static_cast<size_t>(o.top_k));
  std::vector<double> p(keep);
  const double mx = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += p[i] = std::exp((logits[ids[i]] - mx) / o.temperature);
  if (o.top_p < 1.0) {
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < o.top_p * sum) mass += p[n++];
    keep = std::max<size_t>(n, 1);
    p.resize(keep);
  }
  std::discrete_distribution<size_t> pick(p.begin(), p.end());
  return ids[pick(rng)];
}

Generation generate(const CausalLM& lm, const std::vector<int32_t>& prompt,
                    const SamplingOptions& o) {
  o.validate();
  MT_INPUT_CHECK(!prompt.empty(), "the prompt is empty (at least one token is needed)");
  const int64_t V = lm.vocab_size();
  for (int32_t id : prompt)
    MT_INPUT_CHECK(id >= 0 && id < V, "prompt token id ", id, " is outside the vocabulary [0, ", V,
                   ")");
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
  MT_INPUT_CHECK(total <= lm.max_length(), "prompt (", prompt.size(), " tokens) + ",
                 o.max_new_tokens, " new tokens exceed the model's ", lm.max_length(),
                 " positions");
  std::mt19937_64 rng(o.seed);
  Generation g;
  std::vector<int32_t> seq = prompt;
  KvCache cache = lm.make_cache();
  auto column = [](const std::vector<int32_t>& ids, size_t from) {
    Tensor t = Tensor::empty({static_cast<int64_t>(ids.size() - from), 1}, DType::I32);
    std::copy(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end(), t.data<int32_t>());
    return t;
  };
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  // LongRoPE switches to its long factors once the sequence passes this many positions: the cached
  // keys were rotated with the short ones, so the whole sequence is computed again at that step
  // (as transformers' Phi-3 generate does).
  const config::ModelConfig& model = lm.recipe().model;
  const auto rope_switch =
      static_cast<size_t>(model.longrope() ? model.longrope_original_max_position_embeddings : 0);
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    // Prefill: the whole prompt; then only the last token (cached) or everything (reference).
    size_t from = o.use_cache && step > 0 ? seq.size() - 1 : 0;
    if (from > 0 && rope_switch > 0 && static_cast<size_t>(cache.length) <= rope_switch &&
        seq.size() > rope_switch) {
      from = 0;
      cache.length = 0;
    }
    const auto out = lm.forward(column(seq, from), Tensor(), o.use_cache ? &cache : nullptr);
    const int64_t rows = static_cast<int64_t>(seq.size() - from);
    const float* logits = out.logits.data<float>() + (rows - 1) * V;
    // Never decode NaN (greedy would print token 0 forever): the weights or the activations
    // went non-finite.
    const int64_t bad = count_non_finite(logits, V);
    MT_INPUT_CHECK(bad == 0, "generation step ", step + 1, ": the model's logits hold ",
                   non_finite_text(bad), " of ", V,
                   "; its weights or activations overflowed, nothing is decoded");
    const int32_t next = choose_token(logits, V, o, rng);
    seq.push_back(next);
    g.tokens.push_back(next);
    const auto now = clock::now();
    (step == 0 ? g.prefill_seconds : g.decode_seconds) +=
        std::chrono::duration<double>(now - t0).count();
    if (step > 0) ++g.decode_steps;
    t0 = now;
    if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) break;
  }
  return g;
}

}  // namespace megatron::inference
