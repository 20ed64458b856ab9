#include "megatron/training/sft_source.h"

#include "data/blended_dataset.h"
#include "megatron/core/error.h"

namespace megatron::training {

SFTBatchSource::SFTBatchSource(std::vector<std::shared_ptr<const data::SFTDataset>> datasets,
                               std::vector<double> weights, int64_t samples)
    : datasets_(std::move(datasets)) {
  MT_CHECK(!datasets_.empty() && datasets_.size() == weights.size(),
           "SFTBatchSource: one weight per dataset");
  packed_ = datasets_.front()->packing() == data::SFTPacking::Packed;
  for (const auto& d : datasets_)
    MT_CHECK(d->packing() == datasets_.front()->packing() &&
                 d->seq_length() == datasets_.front()->seq_length(),
             "SFTBatchSource: datasets of one blend differ in packing or seq_length");
  if (datasets_.size() == 1) {
    samples_ = datasets_.front()->num_samples();
    return;
  }
  samples_ = samples;
  dataset_index_.resize(static_cast<size_t>(samples));
  dataset_sample_index_.resize(static_cast<size_t>(samples));
  data::build_blending_indices(data::normalize_weights(weights), samples, dataset_index_,
                               dataset_sample_index_);
}

data::SFTSample SFTBatchSource::sample(int64_t index) const {
  const int64_t i = index % samples_;
  if (dataset_index_.empty()) return datasets_.front()->get_sample(i);
  const auto& d = datasets_.at(static_cast<size_t>(dataset_index_[static_cast<size_t>(i)]));
  return d->get_sample(dataset_sample_index_[static_cast<size_t>(i)] % d->num_samples());
}

void SFTBatchSource::fill(int64_t first_sample, int64_t micro_batch_size,
                          models::MicroBatch& mb) const {
  const int64_t S = seq_length(), B = micro_batch_size;
  int32_t* tokens = ensure(mb.tokens, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* labels = ensure(mb.labels, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* positions = nullptr;
  int32_t* segments = nullptr;
  if (packed_) {
    positions = ensure(mb.position_ids, {S, B}, DType::I32, Device::CPU).data<int32_t>();
    segments = ensure(mb.segment_ids, {B, S}, DType::I32, Device::CPU).data<int32_t>();
  } else {
    mb.position_ids = Tensor();
    mb.segment_ids = Tensor();
  }
  for (int64_t b = 0; b < B; ++b) {
    const data::SFTSample s = sample(first_sample + b);
    for (int64_t t = 0; t < S; ++t) {
      const auto k = static_cast<size_t>(t);
      tokens[t * B + b] = s.tokens[k];
      labels[t * B + b] = s.loss_mask[k] ? s.tokens[k + 1] : models::kIgnoreIndex;
      if (packed_) {
        positions[t * B + b] = s.position_ids[k];
        segments[b * S + t] = s.segment_ids[k];
      }
    }
  }
}

namespace {

std::shared_ptr<const BatchSource> build_split(const config::Recipe& recipe,
                                               const data::Tokenizer& tokenizer,
                                               const std::vector<config::DatasetEntry>& files,
                                               int split_id, const std::string& split,
                                               int64_t wanted, std::ostream& out) {
  const auto& sft = recipe.data.sft;
  const data::ChatTemplate tmpl = data::chat_template_from_name(sft.chat_template);
  std::vector<double> weights;
  for (const auto& f : files) weights.push_back(f.weight);
  const std::vector<double> normalized = data::normalize_weights(weights);
  const std::vector<int64_t> sizes = data::blend_sizes_per_dataset(normalized, wanted, 0.005);
  std::vector<std::shared_ptr<const data::SFTDataset>> datasets;
  for (size_t k = 0; k < files.size(); ++k) {
    auto conversations =
        data::SFTConversations::load(config::resolve_path(recipe, files[k].path), tokenizer, tmpl);
    data::SFTDatasetConfig cfg;
    cfg.seq_length = recipe.model.seq_length;
    cfg.seed = recipe.training.seed;
    cfg.num_samples = files.size() > 1 ? sizes[k] : wanted;
    cfg.packing = data::sft_packing_from_name(sft.packing);
    cfg.truncation = data::sft_truncation_from_name(sft.truncation);
    cfg.log = [&](const std::string& line) { out << "[data] " << line << "\n"; };
    auto d = data::SFTDataset::build(std::move(conversations), split_id, split, cfg);
    datasets.push_back(std::move(d));
  }
  const int64_t blended = files.size() > 1 ? wanted : 0;
  return std::make_shared<SFTBatchSource>(std::move(datasets), weights, blended);
}

}  // namespace

std::pair<std::shared_ptr<const BatchSource>, std::shared_ptr<const BatchSource>> sft_sources(
    const config::Recipe& recipe, const data::Tokenizer& tokenizer, std::ostream& out) {
  const auto& sft = recipe.data.sft;
  const auto& tr = recipe.training;
  const int64_t train_samples = tr.train_iters * tr.global_batch_size;
  const int64_t valid_samples = tr.eval_iters * tr.global_batch_size;
  // Separate validation files are read whole; otherwise the split string holds some out.
  const std::string split = sft.valid.empty() ? recipe.data.split : std::string("1");
  std::pair<std::shared_ptr<const BatchSource>, std::shared_ptr<const BatchSource>> s;
  s.first = build_split(recipe, tokenizer, sft.train, 0, split, train_samples, out);
  if (tr.eval_iters <= 0) return s;
  if (!sft.valid.empty())
    s.second = build_split(recipe, tokenizer, sft.valid, 0, "1", valid_samples, out);
  else if (recipe.data.split_fractions()[1] > 0)
    s.second = build_split(recipe, tokenizer, sft.train, 1, split, valid_samples, out);
  return s;
}

}  // namespace megatron::training
