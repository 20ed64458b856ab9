#include "data/bert_dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>

#include "data/gpt_dataset.h"
#include "megatron/core/error.h"

namespace megatron::data {

namespace {

// helpers.cpp LONG_SENTENCE_LEN: a document holding a longer sentence gives no sample.
constexpr int64_t kLongSentenceLength = 512;

// helpers.cpp get_target_sample_len.
int32_t target_sample_length(int32_t short_seq_ratio, int32_t max_length, std::mt19937& gen) {
  if (short_seq_ratio == 0) return max_length;
  const uint64_t r = gen();
  if (r % static_cast<uint64_t>(short_seq_ratio) == 0)
    return static_cast<int32_t>(2 + r % static_cast<uint64_t>(max_length - 1));
  return max_length;
}

void default_log(const std::string& line) { std::cerr << "[data] " << line << "\n"; }

}  // namespace

double numpy_random_double(NumpyRandomState& rng) {
  const uint32_t a = rng.generator().next_uint32() >> 5;
  const uint32_t b = rng.generator().next_uint32() >> 6;
  return (static_cast<double>(a) * 67108864.0 + static_cast<double>(b)) / 9007199254740992.0;
}

BertTokenInfo BertTokenInfo::from_tokenizer(const Tokenizer& tokenizer) {
  const auto* wp = dynamic_cast<const BertWordPieceTokenizer*>(&tokenizer);
  MT_INPUT_CHECK(wp != nullptr,
                 "BERT datasets need a WordPiece tokenizer (BertWordPieceLowerCase "
                 "or BertWordPieceCase), got ",
                 tokenizer.describe());
  BertTokenInfo info;
  info.cls = wp->cls();
  info.sep = wp->sep();
  info.mask = wp->mask();
  info.pad = wp->pad();
  info.vocab_size = wp->vocab_size();
  info.is_continuation.resize(static_cast<size_t>(info.vocab_size));
  for (int64_t i = 0; i < info.vocab_size; ++i)
    info.is_continuation[static_cast<size_t>(i)] =
        wp->id_to_token(static_cast<int32_t>(i)).starts_with("##") ? 1 : 0;
  return info;
}

std::vector<BertSampleRange> build_bert_mapping(
    std::span<const int64_t> docs, const std::function<int64_t(int64_t)>& sentence_length,
    std::optional<int64_t> num_samples, int32_t max_seq_length, double short_seq_probability,
    uint32_t seed, int32_t min_sentences, const std::string& what, int64_t* num_epochs) {
  MT_CHECK(docs.size() >= 1 && max_seq_length > 1 && min_sentences >= 1);
  MT_CHECK(short_seq_probability >= 0.0 && short_seq_probability <= 1.0);
  // helpers.cpp: the probability becomes a ratio, round(1 / p) (C round: half away from zero).
  const int32_t short_seq_ratio =
      short_seq_probability > 0 ? static_cast<int32_t>(std::round(1.0 / short_seq_probability)) : 0;
  std::mt19937 gen(seed);
  std::vector<BertSampleRange> maps;
  const int64_t num_docs = static_cast<int64_t>(docs.size()) - 1;
  // Megatron: one epoch without num_samples, else (practically) unbounded epochs, stopping at
  // the start of the first epoch that finds the count reached.
  const int64_t max_epochs = num_samples ? std::numeric_limits<int32_t>::max() - 1 : 1;
  const uint64_t max_samples =
      num_samples ? static_cast<uint64_t>(*num_samples) : std::numeric_limits<uint64_t>::max();
  int64_t epoch = 0;
  for (; epoch < max_epochs; ++epoch) {
    if (maps.size() >= max_samples) break;
    const size_t before = maps.size();
    for (int64_t d = 0; d < num_docs; ++d) {
      const int64_t first = docs[static_cast<size_t>(d)], last = docs[static_cast<size_t>(d) + 1];
      int64_t remain = last - first;
      bool long_sentence = false;
      if (remain > 1) {
        for (int64_t s = first; s < last && !long_sentence; ++s)
          long_sentence = sentence_length(s) > kLongSentenceLength;
      }
      if (remain < min_sentences || long_sentence) continue;
      int64_t seq_len = 0;
      int32_t num_sent = 0;
      int64_t prev_start = first;
      int32_t target = target_sample_length(short_seq_ratio, max_seq_length, gen);
      for (int64_t s = first; s < last; ++s) {
        seq_len += sentence_length(s);
        ++num_sent;
        --remain;
        if ((seq_len >= target && remain > 1 && num_sent >= min_sentences) || remain == 0) {
          maps.push_back({prev_start, s + 1, target});
          prev_start = s + 1;
          target = target_sample_length(short_seq_ratio, max_seq_length, gen);
          seq_len = 0;
          num_sent = 0;
        }
      }
    }
    // Megatron would loop through ~2^31 empty epochs here.
    MT_INPUT_CHECK(maps.size() > before || !num_samples, what,
                   ": no BERT sample can be built: no document has at least ", min_sentences,
                   " sentence(s) and no sentence longer than ", kLongSentenceLength, " tokens");
  }
  if (num_epochs) *num_epochs = epoch;
  // helpers.cpp: Fisher-Yates from the end with a 64-bit Mersenne Twister seeded seed + 1.
  std::mt19937_64 gen64(static_cast<uint64_t>(seed) + 1);
  for (int64_t i = static_cast<int64_t>(maps.size()) - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(gen64() % static_cast<uint64_t>(i + 1));
    std::swap(maps[static_cast<size_t>(i)], maps[static_cast<size_t>(j)]);
  }
  return maps;
}

std::vector<int32_t> create_masked_lm_predictions(std::span<const int32_t> tokens,
                                                  int64_t target_length, const BertTokenInfo& info,
                                                  const BERTDatasetConfig& config,
                                                  NumpyRandomState& rng,
                                                  std::vector<int32_t>& positions,
                                                  std::vector<int32_t>& labels) {
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  // Candidates: whole words (a piece and the "##" pieces after it; a "##" piece with no word
  // before it starts one). [CLS]/[SEP] are never candidates, but do not end a word either
  // (Megatron's quirk: a "##" piece right after [SEP] joins the last word before it).
  std::vector<std::vector<int32_t>> candidates;
  for (int64_t i = 0; i < n_tokens; ++i) {
    const int32_t t = tokens[static_cast<size_t>(i)];
    if (t == info.cls || t == info.sep) continue;
    if (info.is_continuation[static_cast<size_t>(t)] && config.masking_do_full_word &&
        !candidates.empty())
      candidates.back().push_back(static_cast<int32_t>(i));
    else
      candidates.push_back({static_cast<int32_t>(i)});
  }

  const double p = config.masking_probability;
  // Python's round (half to even) = nearbyint in the default rounding mode.
  const double by_length = std::max(1.0, std::nearbyint(static_cast<double>(n_tokens) * p));
  const double n_maskings = std::min(p * static_cast<double>(target_length), by_length);

  // n-gram probabilities ~ 1/n, normalised (numpy's arithmetic: sum, divide, renormalise,
  // cumulative sum, divide by the last value) -> the cdf numpy's choice() searches.
  const int32_t max_ngram = config.masking_max_ngram;
  std::vector<double> nprobs(static_cast<size_t>(max_ngram));
  for (int32_t n = 0; n < max_ngram; ++n) nprobs[static_cast<size_t>(n)] = 1.0 / (n + 1);
  {
    const double s = numpy_sum(nprobs);
    for (double& x : nprobs) x /= s;
  }
  if (config.masking_use_longer_ngrams) std::reverse(nprobs.begin(), nprobs.end());
  std::vector<double> cdf = nprobs;
  {
    const double s = numpy_sum(nprobs);
    for (double& x : cdf) x /= s;
    for (size_t k = 1; k < cdf.size(); ++k) cdf[k] += cdf[k - 1];
    const double last = cdf.back();
    for (double& x : cdf) x /= last;
  }

  // The candidate order: numpy's shuffle of the candidate list.
  std::vector<int32_t> order(candidates.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
  rng.shuffle(std::span<int32_t>(order));

  std::vector<int32_t> out(tokens.begin(), tokens.end());
  std::vector<uint8_t> masked(static_cast<size_t>(n_tokens), 0);
  std::vector<std::pair<int32_t, int32_t>> picked;  // (position, original id)
  std::vector<int32_t> ngram;
  const auto num_candidates = static_cast<int64_t>(candidates.size());
  for (const int32_t c : order) {
    if (static_cast<double>(picked.size()) >= n_maskings) break;
    // choice(arange(1, N + 1), p): one random(), searchsorted(cdf, u, side="right").
    const double u = numpy_random_double(rng);
    int32_t n = static_cast<int32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()) + 1;
    bool skip = false;
    while (true) {
      ngram.clear();
      for (int64_t k = c; k < std::min<int64_t>(c + n, num_candidates); ++k)
        ngram.insert(ngram.end(), candidates[static_cast<size_t>(k)].begin(),
                     candidates[static_cast<size_t>(k)].end());
      --n;
      if (n_maskings >= static_cast<double>(picked.size() + ngram.size())) break;
      if (n == 0) {
        skip = true;
        break;
      }
    }
    if (skip) continue;
    if (std::any_of(ngram.begin(), ngram.end(),
                    [&](int32_t i) { return masked[static_cast<size_t>(i)] != 0; }))
      continue;
    for (const int32_t i : ngram) {
      masked[static_cast<size_t>(i)] = 1;
      // 80% [MASK]; else half the time a random vocabulary id; else unchanged.
      if (numpy_random_double(rng) < 0.8) {
        out[static_cast<size_t>(i)] = info.mask;
      } else if (numpy_random_double(rng) >= 0.5) {
        out[static_cast<size_t>(i)] =
            static_cast<int32_t>(rng.random_interval(static_cast<uint64_t>(info.vocab_size - 1)));
      }
      picked.emplace_back(i, tokens[static_cast<size_t>(i)]);
    }
  }
  std::sort(picked.begin(), picked.end());
  positions.clear();
  labels.clear();
  for (const auto& [pos, label] : picked) {
    positions.push_back(pos);
    labels.push_back(label);
  }
  return out;
}

std::shared_ptr<BERTDataset> BERTDataset::build(std::shared_ptr<const IndexedDataset> dataset,
                                                int split_id, DocumentRange documents,
                                                BertTokenInfo tokens,
                                                const BERTDatasetConfig& config) {
  MT_CHECK(dataset != nullptr, "BERTDataset needs a dataset");
  const std::string what =
      concat("BERT dataset '", dataset->prefix(), "' (", split_name(split_id), " split)");
  MT_INPUT_CHECK(config.seq_length >= 5 && config.seq_length <= std::numeric_limits<int32_t>::max(),
                 what, ": seq_length must be >= 5 ([CLS] A [SEP] B [SEP]), got ",
                 config.seq_length);
  MT_INPUT_CHECK(config.seed >= 1 && config.seed < (uint64_t{1} << 31), what,
                 ": the seed must be in [1, 2^31) (Megatron's helpers take an int32 > 0), got ",
                 config.seed);
  MT_INPUT_CHECK(config.masking_probability > 0 && config.masking_probability < 1, what,
                 ": masking_probability must be in (0, 1), got ", config.masking_probability);
  MT_INPUT_CHECK(config.short_seq_probability >= 0 && config.short_seq_probability <= 1, what,
                 ": short_seq_probability must be in [0, 1], got ", config.short_seq_probability);
  MT_INPUT_CHECK(config.masking_max_ngram >= 1, what, ": masking_max_ngram must be >= 1, got ",
                 config.masking_max_ngram);
  MT_INPUT_CHECK(!config.num_samples || *config.num_samples >= 0, what,
                 ": num_samples must be >= 0, got ", *config.num_samples);
  MT_INPUT_CHECK(tokens.cls >= 0 && tokens.sep >= 0 && tokens.mask >= 0 && tokens.pad >= 0 &&
                     tokens.vocab_size > 0 &&
                     static_cast<int64_t>(tokens.is_continuation.size()) == tokens.vocab_size,
                 what, ": the vocabulary lacks [CLS], [SEP], [MASK] or [PAD]");
  MT_INPUT_CHECK(
      documents.begin >= 0 && documents.end <= dataset->num_documents() && documents.size() > 0,
      what, ": the split's document range [", documents.begin, ", ", documents.end,
      ") is empty or outside the dataset's ", dataset->num_documents(), " documents");

  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<BERTDataset> ds(new BERTDataset());
  ds->dataset_ = std::move(dataset);
  ds->split_id_ = split_id;
  ds->documents_ = documents;
  ds->tokens_ = std::move(tokens);
  ds->config_ = config;
  const auto bounds = ds->dataset_->document_indices().subspan(
      static_cast<size_t>(documents.begin), static_cast<size_t>(documents.size() + 1));
  const IndexedDataset& data = *ds->dataset_;
  ds->mapping_ = build_bert_mapping(
      bounds, [&data](int64_t s) { return data.sequence_length(s); }, config.num_samples,
      static_cast<int32_t>(config.seq_length - 3), config.short_seq_probability,
      static_cast<uint32_t>(config.seed), config.binary_head ? 2 : 1, what, &ds->num_epochs_);
  MT_INPUT_CHECK(!ds->mapping_.empty() || (config.num_samples && *config.num_samples == 0), what,
                 ": no BERT sample can be built (documents [", documents.begin, ", ", documents.end,
                 "): none has ", config.binary_head ? "2" : "1",
                 "+ sentences without a sentence over 512 tokens)");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& log = config.log ? config.log : default_log;
  char buf[128];
  std::snprintf(buf, sizeof buf, " (%.2f s)", secs);
  log(ds->describe() + buf);
  return ds;
}

const BertSampleRange& BERTDataset::sample_range(int64_t index) const {
  MT_CHECK(index >= 0 && index < num_samples(), "BERT sample ", index, " out of range [0, ",
           num_samples(), ")");
  return mapping_[static_cast<size_t>(index)];
}

BertSample BERTDataset::get(int64_t index) const {
  const BertSampleRange& r = sample_range(index);
  const BertTokenInfo& info = tokens_;
  const auto S = static_cast<size_t>(config_.seq_length);
  NumpyRandomState rng((config_.seed + static_cast<uint64_t>(index)) & 0xffffffffull);

  // The sentences, and the A | B split point.
  const int64_t n = r.end - r.begin;
  std::vector<std::vector<int32_t>> sentences;
  sentences.reserve(static_cast<size_t>(n));
  for (int64_t s = r.begin; s < r.end; ++s) {
    sentences.push_back(dataset_->read(s));
    for (const int32_t t : sentences.back())
      MT_INPUT_CHECK(t >= 0 && t < info.vocab_size, "dataset '", dataset_->prefix(), "': sentence ",
                     s, " holds token id ", t, ", outside the BERT vocabulary (size ",
                     info.vocab_size, ")");
  }
  int64_t pivot = n;
  bool is_random = false;
  if (config_.binary_head) {
    MT_CHECK(n > 1, "a BERT sample with NSP needs two sentences");
    pivot = 1;
    if (n >= 3) pivot = 1 + static_cast<int64_t>(rng.random_interval(static_cast<uint64_t>(n - 2)));
    is_random = numpy_random_double(rng) < 0.5;
  }
  std::vector<int32_t> a, b;
  for (int64_t k = 0; k < n; ++k) {
    auto& dst = k < pivot ? a : b;
    dst.insert(dst.end(), sentences[static_cast<size_t>(k)].begin(),
               sentences[static_cast<size_t>(k)].end());
  }
  if (is_random) std::swap(a, b);

  // Trim the longer segment (B on ties) from a random end until A + B fits the target.
  const auto target = static_cast<size_t>(r.target_length);
  bool truncated = false;
  size_t a0 = 0, a1 = a.size(), b0 = 0, b1 = b.size();  // kept ranges
  while ((a1 - a0) + (b1 - b0) > target) {
    truncated = true;
    const bool from_a = (a1 - a0) > (b1 - b0);
    const bool front = numpy_random_double(rng) < 0.5;
    size_t& begin = from_a ? a0 : b0;
    size_t& end = from_a ? a1 : b1;
    if (front)
      ++begin;
    else
      --end;
  }

  std::vector<int32_t> tokens;
  std::vector<int32_t> types;
  tokens.reserve(S);
  tokens.push_back(info.cls);
  tokens.insert(tokens.end(), a.begin() + static_cast<std::ptrdiff_t>(a0),
                a.begin() + static_cast<std::ptrdiff_t>(a1));
  tokens.push_back(info.sep);
  types.assign(tokens.size(), 0);
  if (b1 > b0) {
    tokens.insert(tokens.end(), b.begin() + static_cast<std::ptrdiff_t>(b0),
                  b.begin() + static_cast<std::ptrdiff_t>(b1));
    tokens.push_back(info.sep);
    types.resize(tokens.size(), 1);
  }
  MT_CHECK(tokens.size() <= S);

  std::vector<int32_t> positions, labels;
  BertSample out;
  out.tokens =
      create_masked_lm_predictions(tokens, r.target_length, info, config_, rng, positions, labels);
  const size_t len = out.tokens.size();
  out.tokens.resize(S, info.pad);
  out.token_types = std::move(types);
  out.token_types.resize(S, 0);
  out.labels.assign(S, kBertIgnoreLabel);
  for (size_t k = 0; k < positions.size(); ++k)
    out.labels[static_cast<size_t>(positions[k])] = labels[k];
  out.padding_mask.assign(S, 0);
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + static_cast<std::ptrdiff_t>(len),
            uint8_t{1});
  out.is_random = is_random ? 1 : 0;
  out.truncated = truncated ? 1 : 0;
  return out;
}

std::string BERTDataset::describe() const {
  return concat(
      "BERTDataset(", dataset_->prefix(), ", ", split_name(split_id_), " documents [",
      documents_.begin, ", ", documents_.end, "), seq_length ", config_.seq_length, ", seed ",
      config_.seed, ", ", num_samples(), " samples in ", num_epochs_, " epoch",
      num_epochs_ == 1 ? "" : "s",
      config_.num_samples ? concat(" (", *config_.num_samples, " requested)") : std::string(),
      config_.binary_head ? ", NSP" : ", no NSP", ")");
}

}  // namespace megatron::data
