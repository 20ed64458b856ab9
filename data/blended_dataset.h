#pragma once
// Megatron-LM's BlendedDataset and the GPT part of BlendedMegatronDatasetBuilder.
//
// Blending index (helpers.cpp build_blending_indices): with normalised weights w_d and c_d the
// samples drawn so far from dataset d, output sample i (0-based) comes from the dataset with the
// largest error w_d * max(i, 1) - c_d (the first such d on ties); its sample number there is c_d,
// then c_d += 1. (So samples 0 and 1 both use max(i, 1) = 1.)
//
// Builder (build_gpt_datasets), with N_s the samples asked of split s:
//   - one path: each split is a GPTDataset of that path with num_samples N_s (Megatron's
//     unweighted single --data-path; a weight given with one path is ignored);
//   - several paths: weights normalised (numpy: w / sum(w)); dataset d's split s is a
//     GPTDataset asked for ceil(ceil(N_s * w_d) * (1 + 0.005)) samples (Megatron's
//     mid_level_dataset_surplus); the split is a BlendedDataset over them of
//     size sum_d ceil(N_s * w_d), blending with the weights normalised once more (as Megatron's
//     BlendedDataset does). Each path is split on its own (split_document_ranges over its own
//     sequence count), then blended per split.
// A split whose share of the split string is 0, or with N_s == 0, is not built (nullptr).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "data/gpt_dataset.h"

namespace megatron::data {

// numpy's w / numpy.sum(w) (megatron.core.datasets.utils.normalize).
std::vector<double> normalize_weights(std::span<const double> weights);

// helpers.cpp build_blending_indices. `weights` are used as given (normalise them first).
void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::span<int16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index);

// ceil(ceil(target * w_d) * (1 + surplus)) per dataset (the builder's per-dataset sizes; with
// surplus 0 the blended targets).
std::vector<int64_t> blend_sizes_per_dataset(std::span<const double> normalized_weights,
                                             int64_t target, double surplus);

class BlendedDataset final : public SampleDataset {
 public:
  // weights: > 0 each (normalised here); size: the number of samples. Every dataset must have
  // the same seq_length and enough samples for its share (else InputError naming it).
  BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                 std::vector<double> weights, int64_t size);

  int64_t num_samples() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t seq_length() const override { return seq_length_; }
  void get(int64_t index, int32_t* out) const override;
  std::string describe() const override;

  const std::vector<std::shared_ptr<const SampleDataset>>& datasets() const { return datasets_; }
  const std::vector<double>& weights() const { return weights_; }  // normalised
  std::span<const int16_t> dataset_index() const { return dataset_index_; }
  std::span<const int64_t> dataset_sample_index() const { return dataset_sample_index_; }

 private:
  std::vector<std::shared_ptr<const SampleDataset>> datasets_;
  std::vector<double> weights_;
  int64_t seq_length_ = 0;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

struct GPTDatasetsSpec {
  std::vector<std::pair<std::string, double>> paths_weights;  // dataset prefixes and weights
  std::string split = "969,30,1";
  int64_t seq_length = 0;
  uint64_t seed = 1234;
  std::array<int64_t, 3> num_samples{};  // train, valid, test
  std::string cache_dir;                 // empty: next to each dataset (see GPTDatasetConfig)
  // Distributed build (see GPTDataset::build_or_load): barrier() is called once per GPTDataset.
  bool is_builder = true;
  std::function<void()> barrier;
  std::function<void(const std::string&)> log;  // unset: "[data] ..." on stderr
};

struct GPTDatasets {
  std::array<std::shared_ptr<const SampleDataset>, 3> splits;  // train, valid, test (or nullptr)
  std::shared_ptr<const SampleDataset> train() const { return splits[0]; }
  std::shared_ptr<const SampleDataset> valid() const { return splits[1]; }
  std::shared_ptr<const SampleDataset> test() const { return splits[2]; }
};

// Opens each path, splits it, builds (or loads) the GPTDatasets and blends them per split.
// InputError for no paths, a non-positive or non-finite weight, a split that is asked for
// samples but has no sequences in some path (naming the path, the split string and the three
// ranges), or any GPTDataset error.
GPTDatasets build_gpt_datasets(const GPTDatasetsSpec& spec);

// The same over already opened sources (tests, the mock source). sources[i] pairs with
// spec.paths_weights[i].second; the path strings are not used.
GPTDatasets build_gpt_datasets(const GPTDatasetsSpec& spec,
                               const std::vector<std::shared_ptr<const SequenceSource>>& sources);

}  // namespace megatron::data
