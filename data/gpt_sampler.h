#pragma once
// A simple GPT sampler over one indexed dataset (the full Megatron GPTDataset with its
// doc/sample/shuffle index caching comes later).
//
// Splits. The documents are divided into train/valid/test with Megatron's arithmetic: the
// split string ("969,30,1", "98,2", "1") gives up to three non-negative weights (missing ones
// are 0), normalised to fractions w; with the running sums e_0 = 0, e_{i+1} = e_i + w_i,
// split i covers documents [round(e_i * D), round(e_{i+1} * D)) where round() is round-half-
// to-even on the double product (Python's round), and D = num_documents().
//
// Samples. Within a split, the tokens of its documents (all their sequences, EOD tokens as
// stored) are concatenated into one stream of T tokens. Window w (0 <= w < W) is the
// seq_length + 1 tokens starting at stream offset w * seq_length, so consecutive windows
// overlap by one token (the last label of one is the first input of the next) and
// W = floor((T - 1) / seq_length); a trailing remainder shorter than a window is unused.
//
// Order. sample_index s belongs to epoch e = s / W and is window perm_e[s % W]. perm_e is a
// Fisher-Yates shuffle (from the end: for i = W-1 down to 1, swap p[i] with p[j], j uniform
// in [0, i]) of the identity, driven by std::mt19937_64 seeded with
//     splitmix64(splitmix64(splitmix64(seed) ^ split_id) ^ e)     (split_id 0/1/2 = train/
// valid/test). The uniform draw j in [0, i] takes 64-bit outputs ANDed with the smallest
// all-ones mask >= i and rejects values > i. Everything is specified here, so the order is
// the same on every platform and standard library (no std::shuffle / std::*_distribution).
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "data/indexed_dataset.h"

namespace megatron::data {

// Parses "969,30,1" into normalised fractions [train, valid, test]. Throws InputError naming
// the string when it is not 1-3 comma-separated non-negative numbers with a positive sum.
std::vector<double> parse_split(const std::string& split);

struct DocumentRange {
  int64_t begin = 0, end = 0;  // documents [begin, end)
  int64_t size() const { return end - begin; }
};
// The three document ranges of `split` over num_documents documents (Megatron's arithmetic).
std::vector<DocumentRange> split_document_ranges(const std::string& split, int64_t num_documents);

// "train" -> 0, "valid" (or "validation") -> 1, "test" -> 2; InputError otherwise.
int split_id_from_name(std::string_view name);

uint64_t splitmix64(uint64_t x);

class GPTSampler {
 public:
  // Throws InputError (naming the dataset prefix) when the split is malformed, when the
  // requested split has no documents, or when it has fewer than seq_length + 1 tokens.
  GPTSampler(std::shared_ptr<const IndexedDataset> dataset, std::string_view split_name,
             const std::string& split, int64_t seq_length, uint64_t seed);

  int64_t num_samples_per_epoch() const { return num_windows_; }
  int64_t seq_length() const { return seq_length_; }
  // Fills tokens_seq_plus_1[0 .. seq_length]. sample_index >= 0 may exceed one epoch.
  // Thread-safe.
  void get(int64_t sample_index, int32_t* tokens_seq_plus_1) const;

  // Introspection (tests, logs).
  DocumentRange documents() const { return docs_; }
  int64_t num_tokens() const { return stream_tokens_; }  // T
  int64_t window_of(int64_t sample_index) const;         // perm_e[s % W]
  void read_window(int64_t window, int32_t* out) const;  // window w, unshuffled
  const IndexedDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;

  std::shared_ptr<const IndexedDataset> dataset_;
  int split_id_ = 0;
  int64_t seq_length_ = 0;
  uint64_t seed_ = 0;
  DocumentRange docs_;
  int64_t seq_begin_ = 0;     // first sequence of the split
  std::vector<int64_t> cum_;  // cum_[k] = stream tokens before sequence seq_begin_+k
  int64_t stream_tokens_ = 0;
  int64_t num_windows_ = 0;

  mutable std::mutex mu_;
  mutable int64_t cached_epoch_[2] = {-1, -1};
  mutable std::shared_ptr<const std::vector<int64_t>> cached_perm_[2];
  mutable int cache_next_ = 0;
};

}  // namespace megatron::data
