#pragma once
// BERT pretraining samples (masked LM + next-sentence prediction) from a sentence-split indexed
// dataset (preprocess_data --split-sentences: one sequence per sentence, documents group them),
// following Megatron-LM's BERTMaskedWordPieceDataset (megatron/core/datasets/bert_dataset.py,
// masked_dataset.py and helpers.cpp build_mapping). data/README.md ("BERT datasets") has the
// full description; in short:
//
//   split        by *documents*: split_document_ranges(split, num_documents) (Megatron's
//                numel_low_level_dataset for masked datasets is the document count).
//   mapping      build_bert_mapping: per epoch, per document (in order) with at least
//                min_sentences sentences and no sentence longer than 512 tokens, sentences are
//                accumulated until their length reaches a target length T (S - 3, or with
//                probability ~short_seq_probability a shorter one, 2 + r % (S - 4)), never
//                leaving a single sentence behind; each group is one sample (first sentence,
//                end sentence, T). Epochs repeat until num_samples are reached (unset: one
//                epoch); then the list is shuffled. std::mt19937(seed) draws the targets,
//                std::mt19937_64(seed + 1) the shuffle (j = draw % (i + 1)), as helpers.cpp.
//   sample i     NumpyRandomState((seed + i) mod 2^32), used in this order: the split point of
//                the sentences into A | B (1 + random_interval(n - 2) when n >= 3 sentences,
//                else 1), is_random = random() < 0.5 (then A and B are swapped: B is the text
//                that *precedes* A), truncation of the longer segment (B on ties) one token at
//                a time, from the front when random() < 0.5 else from the back, until
//                |A| + |B| <= T; then tokens [CLS] A [SEP] B [SEP] (types 0 for [CLS] A [SEP],
//                1 for B [SEP]) and the masking below; padding to S.
//   masking      Megatron's _create_masked_lm_predictions: candidates are whole words (a piece
//                plus the "##" pieces after it; [CLS]/[SEP] never), up to
//                min(p * T, max(1, round(p * len))) tokens are masked by taking candidate
//                n-grams (n <= masking_max_ngram, P(n) ~ 1/n) in a shuffled order; each masked
//                token becomes [MASK] with probability 0.8, else a uniformly random vocabulary
//                id with probability 0.5, else stays.
// With the same sentence dataset, vocabulary size, seed and settings the samples are Megatron's,
// token for token (see data/README.md for the few deliberate differences: the padding mask,
// the ignore label -100, no index cache).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_sampler.h"
#include "data/indexed_dataset.h"
#include "data/numpy_random.h"
#include "data/tokenizer.h"

namespace megatron::data {

// The label of a position that is not predicted (the trainer's kIgnoreIndex).
inline constexpr int32_t kBertIgnoreLabel = -100;

// The vocabulary facts BERT samples need.
struct BertTokenInfo {
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;
  int64_t vocab_size = 0;
  std::vector<uint8_t> is_continuation;  // [vocab_size]: 1 when the piece starts with "##"
  // From a BertWordPieceTokenizer; InputError for any other tokenizer.
  static BertTokenInfo from_tokenizer(const Tokenizer& tokenizer);
};

struct BERTDatasetConfig {
  int64_t seq_length = 512;                // S >= 5: [CLS] A [SEP] B [SEP] plus padding
  uint64_t seed = 1234;                    // 1 <= seed < 2^31 (helpers.cpp takes an int32 > 0)
  std::optional<int64_t> num_samples;      // unset: one epoch; else whole epochs until reached
  double masking_probability = 0.15;       // Megatron --mask-prob, in (0, 1)
  double short_seq_probability = 0.1;      // Megatron --short-seq-prob, in [0, 1]
  int32_t masking_max_ngram = 3;           // pretrain_bert.py's value; 1: plain whole-word masking
  bool masking_do_full_word = true;        // whole-word candidates (false: every piece alone)
  bool masking_use_longer_ngrams = false;  // P(n) ~ 1/(N + 1 - n) instead of 1/n
  bool binary_head = true;                 // next-sentence prediction (Megatron --bert-binary-head)
  // Progress lines (no newline). Unset: "[data] ..." lines on stderr.
  std::function<void(const std::string&)> log;
};

struct BertSample {
  std::vector<int32_t> tokens;        // [S] ids, pad() after the real tokens
  std::vector<int32_t> token_types;   // [S] 0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding
  std::vector<int32_t> labels;        // [S] original id at masked positions, else -100
  std::vector<uint8_t> padding_mask;  // [S] 1 on real tokens, 0 on padding
  int32_t is_random = 0;              // NSP label: 1 when B does not follow A (swapped)
  int32_t truncated = 0;              // 1 when A/B were trimmed to the target length
};

// One entry of the sample mapping: sentences [begin, end) (dataset sequence ids) and the
// target length of A + B.
struct BertSampleRange {
  int64_t begin = 0, end = 0;
  int32_t target_length = 0;
};

// helpers.cpp build_mapping. document_boundaries: the split's document boundaries (sentence
// ids, D + 1 values); sentence_length(id) the sentence lengths. Throws InputError (mentioning
// `what`) when num_samples > 0 but an epoch yields no sample.
std::vector<BertSampleRange> build_bert_mapping(
    std::span<const int64_t> document_boundaries,
    const std::function<int64_t(int64_t)>& sentence_length, std::optional<int64_t> num_samples,
    int32_t max_seq_length, double short_seq_probability, uint32_t seed, int32_t min_sentences,
    const std::string& what, int64_t* num_epochs = nullptr);

// Megatron's masking of one sample. `tokens` is [CLS] A [SEP] (B [SEP]); returns the masked
// tokens and writes the masked positions (ascending) and their original ids. Uses `rng`.
std::vector<int32_t> create_masked_lm_predictions(std::span<const int32_t> tokens,
                                                  int64_t target_length, const BertTokenInfo& info,
                                                  const BERTDatasetConfig& config,
                                                  NumpyRandomState& rng,
                                                  std::vector<int32_t>& positions,
                                                  std::vector<int32_t>& labels);

// numpy's RandomState.random() (random_sample): 53 bits from two 32-bit outputs.
double numpy_random_double(NumpyRandomState& rng);

class BERTDataset {
 public:
  // split_id 0/1/2 = train/valid/test; `documents` the split's document range. InputError
  // (naming the dataset and split) for bad settings, an empty range, or a split with no sample.
  static std::shared_ptr<BERTDataset> build(std::shared_ptr<const IndexedDataset> dataset,
                                            int split_id, DocumentRange documents,
                                            BertTokenInfo tokens, const BERTDatasetConfig& config);

  int64_t num_samples() const { return static_cast<int64_t>(mapping_.size()); }
  int64_t seq_length() const { return config_.seq_length; }
  // Sample i (0 <= i < num_samples()); const, thread-safe, a function of (seed, i) and the data
  // only. Throws Error when i is out of range, InputError for a token id outside the vocabulary.
  BertSample get(int64_t index) const;
  std::string describe() const;

  const BertSampleRange& sample_range(int64_t index) const;
  int64_t num_epochs() const { return num_epochs_; }
  int split_id() const { return split_id_; }
  DocumentRange documents() const { return documents_; }
  const BERTDatasetConfig& config() const { return config_; }
  const BertTokenInfo& token_info() const { return tokens_; }
  const IndexedDataset& dataset() const { return *dataset_; }

 private:
  BERTDataset() = default;
  std::shared_ptr<const IndexedDataset> dataset_;
  int split_id_ = 0;
  DocumentRange documents_;
  BertTokenInfo tokens_;
  BERTDatasetConfig config_;
  std::vector<BertSampleRange> mapping_;
  int64_t num_epochs_ = 0;
};

}  // namespace megatron::data
