#include "data/blended_dataset.h"

#include <cmath>
#include <limits>

#include "megatron/core/error.h"

namespace megatron::data {

namespace {

// a * b rounded to double, never fused with a following subtraction into an FMA (the project
// builds with -march=native, where GCC contracts a * b - c by default; Megatron's helpers.cpp,
// built without FMA, rounds the product, and ties between datasets depend on that rounding).
inline double rounded_product(double a, double b) {
  double p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  asm volatile("" : "+x"(p));
#elif defined(__GNUC__) && defined(__aarch64__)
  asm volatile("" : "+w"(p));
#else
  volatile double v = p;
  p = v;
#endif
  return p;
}

}  // namespace

std::vector<double> normalize_weights(std::span<const double> weights) {
  const double sum = numpy_sum(weights);
  std::vector<double> out(weights.begin(), weights.end());
  for (double& w : out) w /= sum;
  return out;
}

void build_blending_indices(std::span<const double> weights, int64_t size,
                            std::span<int16_t> dataset_index,
                            std::span<int64_t> dataset_sample_index) {
  MT_CHECK(!weights.empty() && weights.size() < 32767, "blending needs 1 to 32766 datasets, got ",
           weights.size());
  MT_CHECK(size >= 0 && dataset_index.size() == static_cast<size_t>(size) &&
               dataset_sample_index.size() == static_cast<size_t>(size),
           "blending index sizes do not match ", size);
  std::vector<int64_t> drawn(weights.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = rounded_product(weights[0], x) - static_cast<double>(drawn[0]);
    for (size_t d = 1; d < weights.size(); ++d) {
      const double error = rounded_product(weights[d], x) - static_cast<double>(drawn[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index[static_cast<size_t>(i)] = static_cast<int16_t>(best);
    dataset_sample_index[static_cast<size_t>(i)] = drawn[best]++;
  }
}

std::vector<int64_t> blend_sizes_per_dataset(std::span<const double> normalized_weights,
                                             int64_t target, double surplus) {
  std::vector<int64_t> out;
  const double factor = 1.0 + surplus;
  for (double w : normalized_weights) {
    const double share = std::ceil(static_cast<double>(target) * w);
    out.push_back(static_cast<int64_t>(std::ceil(share * factor)));
  }
  return out;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleDataset>> datasets,
                               std::vector<double> weights, int64_t size)
    : datasets_(std::move(datasets)) {
  MT_INPUT_CHECK(!datasets_.empty(), "a blended dataset needs at least one dataset");
  MT_INPUT_CHECK(datasets_.size() < 32767, "a blended dataset takes at most 32766 datasets, got ",
                 datasets_.size());
  MT_INPUT_CHECK(weights.size() == datasets_.size(), "blended dataset: ", datasets_.size(),
                 " datasets but ", weights.size(), " weights");
  MT_INPUT_CHECK(size >= 0, "blended dataset: size must be >= 0, got ", size);
  for (size_t d = 0; d < datasets_.size(); ++d) {
    MT_CHECK(datasets_[d] != nullptr, "blended dataset: dataset ", d, " is null");
    MT_INPUT_CHECK(std::isfinite(weights[d]) && weights[d] > 0, "blended dataset: the weight of ",
                   datasets_[d]->describe(), " is ", weights[d],
                   "; weights must be finite and > 0");
  }
  seq_length_ = datasets_[0]->seq_length();
  for (const auto& ds : datasets_)
    MT_INPUT_CHECK(ds->seq_length() == seq_length_, "blended dataset: ", ds->describe(),
                   " has seq_length ", ds->seq_length(), ", ", datasets_[0]->describe(), " has ",
                   seq_length_);
  weights_ = normalize_weights(weights);
  dataset_index_.resize(static_cast<size_t>(size));
  dataset_sample_index_.resize(static_cast<size_t>(size));
  build_blending_indices(weights_, size, dataset_index_, dataset_sample_index_);
  std::vector<int64_t> counts(datasets_.size(), 0);
  for (int16_t d : dataset_index_) ++counts[static_cast<size_t>(d)];
  for (size_t d = 0; d < datasets_.size(); ++d)
    MT_INPUT_CHECK(counts[d] <= datasets_[d]->num_samples(), "blended dataset: the blend draws ",
                   counts[d], " samples from ", datasets_[d]->describe(), ", which has only ",
                   datasets_[d]->num_samples());
}

void BlendedDataset::get(int64_t index, int32_t* out) const {
  MT_CHECK(index >= 0 && index < num_samples(), "sample ", index, " out of range [0, ",
           num_samples(), ") of ", describe());
  const auto i = static_cast<size_t>(index);
  datasets_[static_cast<size_t>(dataset_index_[i])]->get(dataset_sample_index_[i], out);
}

std::string BlendedDataset::describe() const {
  std::string w;
  for (size_t d = 0; d < weights_.size(); ++d) w += concat(d ? ", " : "", weights_[d]);
  return concat("BlendedDataset(", datasets_.size(), " datasets, weights [", w, "], ",
                num_samples(), " samples)");
}

// ---- builder -------------------------------------------------------------------------------

GPTDatasets build_gpt_datasets(const GPTDatasetsSpec& spec) {
  std::vector<std::shared_ptr<const SequenceSource>> sources;
  for (const auto& [path, weight] : spec.paths_weights) {
    (void)weight;
    sources.push_back(std::make_shared<IndexedSequenceSource>(path));
  }
  return build_gpt_datasets(spec, sources);
}

GPTDatasets build_gpt_datasets(const GPTDatasetsSpec& spec,
                               const std::vector<std::shared_ptr<const SequenceSource>>& sources) {
  MT_INPUT_CHECK(!spec.paths_weights.empty(),
                 "no training data: the list of dataset paths is empty");
  MT_CHECK(sources.size() == spec.paths_weights.size(), "build_gpt_datasets: ", sources.size(),
           " sources for ", spec.paths_weights.size(), " paths");
  const bool blend = sources.size() > 1;
  std::vector<double> raw;
  for (size_t d = 0; d < sources.size(); ++d) {
    const double w = spec.paths_weights[d].second;
    if (blend)
      MT_INPUT_CHECK(std::isfinite(w) && w > 0, "dataset '", sources[d]->name(), "': weight ", w,
                     " must be finite and > 0");
    raw.push_back(w);
  }
  // Which splits exist: Megatron's split matrix has None where e_{i+1} <= e_i.
  const std::vector<double> fractions = parse_split(spec.split);
  bool exists[3];
  double e = 0.0;
  for (int s = 0; s < 3; ++s) {
    exists[s] = e + fractions[static_cast<size_t>(s)] > e;
    e += fractions[static_cast<size_t>(s)];
  }
  std::vector<std::vector<DocumentRange>> ranges;
  for (const auto& src : sources)
    ranges.push_back(split_document_ranges(spec.split, src->num_sequences()));

  GPTDatasetConfig base;
  base.seq_length = spec.seq_length;
  base.seed = spec.seed;
  base.cache_dir = spec.cache_dir;
  base.log = spec.log;

  const std::vector<double> weights = blend ? normalize_weights(raw) : std::vector<double>{1.0};
  GPTDatasets out;
  for (int s = 0; s < 3; ++s) {
    const int64_t n = spec.num_samples[static_cast<size_t>(s)];
    MT_INPUT_CHECK(n >= 0, "the ", split_name(s), " split is asked for ", n, " samples");
    if (!exists[s] || n == 0) continue;
    for (size_t d = 0; d < sources.size(); ++d) {
      const auto& r = ranges[d];
      MT_INPUT_CHECK(r[static_cast<size_t>(s)].size() > 0, "dataset '", sources[d]->name(),
                     "': data split '", spec.split, "' leaves the ", split_name(s),
                     " split empty (", sources[d]->num_sequences(), " sequences: train [",
                     r[0].begin, ", ", r[0].end, "), valid [", r[1].begin, ", ", r[1].end,
                     "), test [", r[2].begin, ", ", r[2].end,
                     ")); use more documents or give this split a larger weight");
    }
    if (!blend) {
      GPTDatasetConfig cfg = base;
      cfg.num_samples = n;
      out.splits[static_cast<size_t>(s)] = GPTDataset::build_or_load(
          sources[0], s, ranges[0][static_cast<size_t>(s)], cfg, spec.is_builder, spec.barrier);
      continue;
    }
    const std::vector<int64_t> target = blend_sizes_per_dataset(weights, n, 0.0);
    const std::vector<int64_t> buffer = blend_sizes_per_dataset(weights, n, 0.005);
    std::vector<std::shared_ptr<const SampleDataset>> parts;
    int64_t size = 0;
    for (size_t d = 0; d < sources.size(); ++d) {
      GPTDatasetConfig cfg = base;
      cfg.num_samples = buffer[d];
      parts.push_back(GPTDataset::build_or_load(sources[d], s, ranges[d][static_cast<size_t>(s)],
                                                cfg, spec.is_builder, spec.barrier));
      size += target[d];
    }
    out.splits[static_cast<size_t>(s)] = std::make_shared<BlendedDataset>(parts, weights, size);
  }
  return out;
}

}  // namespace megatron::data
