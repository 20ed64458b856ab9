#pragma once
// Megatron-LM's GPTDataset: the same samples, in the same order, as
// megatron/core/datasets/gpt_dataset.py (+ helpers.cpp build_sample_idx) for the same data,
// split, sequence length, seed and requested sample count.
//
// A split is a range of *sequences* [begin, end) of the low-level dataset (Megatron splits a
// GPT corpus by sequence count: numel_low_level_dataset = number of sequences; with one
// sequence per document this is the document range). T = the split's tokens, S = seq_length.
//
//   epochs E       1 when num_samples is unset, else the least E >= 1 with E*T >= num_samples*S
//   + 1. separate       E > 1 and the final epoch supplies fewer than int(0.80 * per_epoch)
//   samples,
//                  where per_epoch = (T - 1) / S, sans_final = ((E-1)*T - 1) / S and the final
//                  epoch supplies num_samples - sans_final samples.
//   RNG            one NumpyRandomState(seed), used in this order by:
//   document index the split's sequence ids repeated E times (epoch-major), as int32, shuffled;
//                  when `separate`: the first E-1 epochs shuffled together, then the final
//                  epoch shuffled on its own, concatenated.
//   sample index   (position in the document index, token offset) pairs; sample k spans from
//                  pair k to pair k+1 inclusive of one extra token (windows of S+1 tokens that
//                  may cross documents; consecutive samples share one token). The number of
//                  samples is (E*T - 1) / S (the last partial sequence is dropped). Built as
//                  helpers.cpp build_sample_idx does; a window ending exactly at a document's
//                  end makes the next start at that document's last token.
//   shuffle index  arange(n) shuffled; when `separate`: arange(sans_final) shuffled, then
//                  arange(sans_final, n) shuffled, concatenated (the final epoch's samples stay
//                  at the end).
//   get(i)         reads the window of sample shuffle[i]: S + 1 tokens.
// Every sample of the last epoch is built, so num_samples() >= the requested count; consumers
// use the first num_samples_requested() (Megatron's len() is also the full count).
//
// Index caching: see GPTDataset::build_or_load.
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

namespace megatron::data {

// What the datasets give their consumers: sample i (0 <= i < num_samples()) is seq_length() + 1
// token ids (inputs, and the labels shifted by one). get() is const and thread-safe.
class SampleDataset {
 public:
  virtual ~SampleDataset();
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_length() const = 0;
  virtual void get(int64_t index, int32_t* out) const = 0;  // throws Error when out of range
  virtual std::string describe() const = 0;                 // for logs and messages
};

// The low-level data: numbered token sequences (Megatron's LowLevelDataset). Thread-safe reads.
class SequenceSource {
 public:
  virtual ~SequenceSource();
  virtual int64_t num_sequences() const = 0;
  virtual int64_t sequence_length(int64_t i) const = 0;
  virtual void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const = 0;
  // The on-disk prefix (keys the index cache); empty for synthetic sources (never cached).
  virtual std::string path() const = 0;
  virtual std::string name() const = 0;  // for messages
};

// An IndexedDataset (.bin/.idx) as a SequenceSource.
class IndexedSequenceSource final : public SequenceSource {
 public:
  explicit IndexedSequenceSource(std::shared_ptr<const IndexedDataset> dataset);
  explicit IndexedSequenceSource(const std::string& prefix);  // opens PREFIX.bin/.idx
  int64_t num_sequences() const override { return dataset_->num_sequences(); }
  int64_t sequence_length(int64_t i) const override { return dataset_->sequence_length(i); }
  void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const override {
    dataset_->read(sequence, offset, count, out);
  }
  std::string path() const override { return dataset_->prefix(); }
  std::string name() const override { return dataset_->prefix(); }
  const IndexedDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const IndexedDataset> dataset_;
};

// Deterministic synthetic sequences (Megatron's MockGPTLowLevelDataset in spirit, not in its
// exact numbers): sequence i has length 1 + random_interval(max_length - 1) drawn in order from
// MT19937(seed); its tokens are (i * 7919 + j + 1) % vocab_size for j < length - 1, then eod.
class MockSequenceSource final : public SequenceSource {
 public:
  struct Spec {
    int64_t num_sequences = 100000;
    int64_t max_length = 4096;  // lengths in [1, max_length]
    int32_t vocab_size = 50257;
    int32_t eod = 50256;
    uint32_t seed = 0;
  };
  MockSequenceSource() : MockSequenceSource(Spec{}) {}
  explicit MockSequenceSource(const Spec& spec);
  int64_t num_sequences() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t sequence_length(int64_t i) const override;
  void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const override;
  std::string path() const override { return {}; }
  std::string name() const override;

 private:
  Spec spec_;
  std::vector<int32_t> lengths_;
};

struct GPTDatasetConfig {
  int64_t seq_length = 0;              // S >= 1
  uint64_t seed = 1234;                // numpy RandomState seed: < 2^32
  std::optional<int64_t> num_samples;  // unset: one epoch (Megatron: None)
  // Where build_or_load keeps index files. Empty: Megatron's default, the directory
  // "<dataset prefix>/cache/GPTDataset_indices" (PREFIX is used as a directory name beside
  // PREFIX.bin/.idx). Synthetic sources are never cached.
  std::string cache_dir;
  // Progress and warnings (one line each, no newline). Unset: "[data] ..." lines on stderr.
  std::function<void(const std::string&)> log;
};

// The index arithmetic before any array is built.
struct GPTIndexPlan {
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 0;
  bool separate_final_epoch = false;
  int64_t num_samples_sans_final_epoch = 0;  // meaningful when separate_final_epoch
  int64_t num_samples_total = 0;             // (E*T - 1) / S
};
// Throws InputError (mentioning `what`) when tokens_per_epoch < 2 or the numbers overflow.
GPTIndexPlan plan_gpt_indices(int64_t tokens_per_epoch, std::optional<int64_t> num_samples,
                              int64_t seq_length, const std::string& what);

// The three builders, exposed for tests. `rng` is shared, in this order.
std::vector<int32_t> build_document_index(int64_t begin, int64_t end, int64_t num_epochs,
                                          bool separate_final_epoch, NumpyRandomState& rng);
// Pairs flattened: [2k] = position in the document index, [2k+1] = offset; num_samples + 1
// pairs. `length_of(sequence id)` gives sequence lengths.
std::vector<int64_t> build_sample_index(const std::function<int64_t(int64_t)>& length_of,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_samples);
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size,
                                         NumpyRandomState& rng);

class GPTDataset final : public SampleDataset {
 public:
  // Builds the indices in memory (no cache). split_id 0/1/2 = train/valid/test, `sequences` the
  // split's sequence range. InputError (naming the dataset and the split) for an empty range,
  // a split of fewer than 2 tokens, or one holding no sample of S + 1 tokens.
  static std::shared_ptr<GPTDataset> build(std::shared_ptr<const SequenceSource> source,
                                           int split_id, DocumentRange sequences,
                                           const GPTDatasetConfig& config);

  // Build once, share through the cache. Every rank calls this with the same arguments:
  //  - the builder (rank 0, or the first rank of each node when cache_dir is node-local)
  //    loads a valid cache, or builds the indices and writes them (each file to a temporary
  //    name renamed into place; the description file, written last, commits the set);
  //  - then every rank calls barrier() exactly once (cache hit or not);
  //  - then the other ranks load the cache. A missing, stale or corrupt cache (bad header,
  //    size, checksum, key, or out-of-range values) is never used: it is rebuilt in memory
  //    with a warning (and rewritten by the builder). An unwritable cache directory is a
  //    warning too; the result is the same, every rank then builds for itself.
  // Cache files, in cache_dir: "<key hash>-GPTDataset-<split>-{document_index,sample_index,
  // shuffle_index}.npy" (numpy .npy v1.0: int32 [n], int64 [n+1, 2], int64 [n]) and
  // "...-description.json" (the key: format version, absolute dataset path, split name and
  // sequence range, num_samples, seq_length, seed, sequence count, split token count and an
  // FNV-1a hash of the split's lengths; plus each array's length and FNV-1a checksum).
  static std::shared_ptr<GPTDataset> build_or_load(std::shared_ptr<const SequenceSource> source,
                                                   int split_id, DocumentRange sequences,
                                                   const GPTDatasetConfig& config,
                                                   bool is_builder = true,
                                                   const std::function<void()>& barrier = {});

  // True when a valid cache for these arguments exists (fully validated, as a load would).
  static bool cache_exists(const SequenceSource& source, int split_id, DocumentRange sequences,
                           const GPTDatasetConfig& config);
  // The cache directory these arguments use ("" for synthetic sources).
  static std::string cache_directory(const SequenceSource& source, const GPTDatasetConfig& config);

  int64_t num_samples() const override { return num_samples_total_; }
  int64_t seq_length() const override { return seq_length_; }
  void get(int64_t index, int32_t* out) const override;  // S + 1 ids of sample shuffle[index]
  std::string describe() const override;

  std::optional<int64_t> num_samples_requested() const { return num_samples_requested_; }
  int split_id() const { return split_id_; }
  DocumentRange sequences() const { return sequences_; }
  const GPTIndexPlan& plan() const { return plan_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  std::span<const int32_t> document_index() const { return doc_; }
  std::span<const int64_t> sample_index() const { return sample_; }  // flattened pairs
  std::span<const int64_t> shuffle_index() const { return shuffle_; }
  const SequenceSource& source() const { return *source_; }

  struct Storage;  // owned vectors or mapped cache files
  ~GPTDataset() override;

 private:
  friend struct GPTDatasetAccess;
  GPTDataset() = default;
  void read_window(int64_t sample, int32_t* out) const;

  std::shared_ptr<const SequenceSource> source_;
  int split_id_ = 0;
  DocumentRange sequences_;
  int64_t seq_length_ = 0;
  std::optional<int64_t> num_samples_requested_;
  GPTIndexPlan plan_;
  int64_t num_samples_total_ = 0;
  bool loaded_from_cache_ = false;
  std::unique_ptr<Storage> storage_;
  std::span<const int32_t> doc_;
  std::span<const int64_t> sample_;
  std::span<const int64_t> shuffle_;
};

// "train" / "valid" / "test".
const char* split_name(int split_id);

}  // namespace megatron::data
