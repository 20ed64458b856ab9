#include "megatron/training/data_sources.h"

#include <algorithm>
#include <cmath>

#include "data/bert_dataset.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "megatron/training/bert_source.h"
#include "megatron/training/memory_check.h"
#include "megatron/training/mock_source.h"
#include "megatron/training/sft_source.h"

namespace megatron::training {

namespace {

// Adapts one split of the (blended) Megatron GPT datasets to the trainer's sample source.
class DatasetSource final : public SampleSource {
 public:
  explicit DatasetSource(std::shared_ptr<const data::SampleDataset> dataset)
      : dataset_(std::move(dataset)) {}
  int64_t seq_length() const override { return dataset_->seq_length(); }
  int64_t samples_per_epoch() const override { return dataset_->num_samples(); }
  void get(int64_t index, int32_t* tokens) const override { dataset_->get(index, tokens); }

 private:
  std::shared_ptr<const data::SampleDataset> dataset_;
};

// Megatron's GPT datasets: split, index (built once by rank 0, cached), blended by weight.
Sources gpt_sources(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                    parallel::Communicator& world, std::ostream& out) {
  const auto& d = recipe.data;
  const auto& tr = recipe.training;
  data::GPTDatasetsSpec dspec;
  for (const auto& entry : d.train)
    dspec.paths_weights.emplace_back(config::resolve_path(recipe, entry.path), entry.weight);
  dspec.split = d.split;
  dspec.seq_length = recipe.model.seq_length;
  dspec.seed = tr.seed;
  dspec.num_samples = {tr.train_iters * tr.global_batch_size,
                       tr.eval_iters > 0 ? tr.eval_iters * tr.global_batch_size : 0, 0};
  dspec.cache_dir = d.cache_dir.empty() ? "" : config::resolve_path(recipe, d.cache_dir);
  dspec.is_builder = launch.world_rank == 0;
  dspec.barrier = [&] { world.barrier(); };
  dspec.log = [&](const std::string& line) { out << "[data] " << line << "\n"; };
  const data::GPTDatasets datasets = data::build_gpt_datasets(dspec);
  out << "dataset: " << datasets.train()->describe() << "\n";
  Sources s;
  s.first = std::make_shared<DatasetSource>(datasets.train());
  if (datasets.valid()) s.second = std::make_shared<DatasetSource>(datasets.valid());
  return s;
}

// Megatron's BERT datasets over one sentence-split indexed dataset (preprocess_data
// --split-sentences), split by documents. The sample mapping is cheap: every rank builds it.
Sources bert_sources(const config::Recipe& recipe, const data::Tokenizer& tokenizer,
                     std::ostream& out) {
  const auto& d = recipe.data;
  const auto& tr = recipe.training;
  MT_INPUT_CHECK(d.train.size() == 1, recipe.source_path,
                 ": data.train: BERT training takes one sentence-split dataset (got ",
                 d.train.size(), ")");
  const std::string prefix = config::resolve_path(recipe, d.train.front().path);
  auto dataset = std::make_shared<const data::IndexedDataset>(prefix);
  const auto ranges = data::split_document_ranges(d.split, dataset->num_documents());
  data::BERTDatasetConfig cfg;
  cfg.seq_length = recipe.model.seq_length;
  cfg.seed = tr.seed;
  cfg.masking_probability = d.masking_probability;
  cfg.short_seq_probability = d.short_seq_probability;
  cfg.binary_head = d.bert_binary_head;
  cfg.log = [&](const std::string& line) { out << "[data] " << line << "\n"; };
  const data::BertTokenInfo info = data::BertTokenInfo::from_tokenizer(tokenizer);
  Sources s;
  cfg.num_samples = tr.train_iters * tr.global_batch_size;
  auto train = data::BERTDataset::build(dataset, 0, ranges[0], info, cfg);
  out << "dataset: " << train->describe() << "\n";
  s.first = std::make_shared<BertBatchSource>(train);
  if (tr.eval_iters > 0 && ranges[1].size() > 0) {
    cfg.num_samples = tr.eval_iters * tr.global_batch_size;
    s.second = std::make_shared<BertBatchSource>(
        data::BERTDataset::build(dataset, 1, ranges[1], info, cfg));
  }
  return s;
}

// data.mock: synthetic samples (validation from another seed), no files.
Sources mock_sources(const config::Recipe& recipe, int64_t vocab, std::ostream& out) {
  const int64_t S = recipe.model.seq_length;
  const uint64_t seed = recipe.training.seed;
  out << "dataset: mock (synthetic " << config::option_name(recipe.model.arch) << " samples, vocab "
      << vocab << ")\n";
  if (recipe.model.arch == config::Arch::BERT) {
    const bool nsp = recipe.data.bert_binary_head;
    return {std::make_shared<MockBertSource>(S, vocab, seed, nsp),
            std::make_shared<MockBertSource>(S, vocab, seed + 1, nsp)};
  }
  return {std::make_shared<MockTokenSource>(S, vocab, seed),
          std::make_shared<MockTokenSource>(S, vocab, seed + 1)};
}

// The sample indices every dataset builds hold at least kIndexBytesPerSample bytes per sample
// the run asks for (GPT: sample index 16, shuffle index 8, blending 10): a run asking for more
// than memory holds is refused here, naming the keys, instead of dying of std::bad_alloc
// after building part of them.
void check_index_fits(const config::Recipe& recipe) {
  constexpr double kIndexBytesPerSample = 24.0;
  const auto& tr = recipe.training;
  const double samples =
      static_cast<double>(tr.train_iters) * tr.global_batch_size +
      static_cast<double>(std::max<int64_t>(tr.eval_iters, 0)) * tr.global_batch_size;
  const double need = kIndexBytesPerSample * samples, available = host_available_bytes();
  MT_INPUT_CHECK(available <= 0 || need <= available, recipe.source_path, ": training.train_iters ",
                 tr.train_iters, " x training.global_batch_size ", tr.global_batch_size,
                 " (+ training.eval_iters' validation) = ", static_cast<int64_t>(samples),
                 " samples: their data index alone needs at least ",
                 std::round(need / (1 << 30) * 10) / 10, " GiB; ",
                 std::round(available / (1 << 30) * 10) / 10, " GiB of memory are available");
}

}  // namespace

TrainingData make_training_data(const config::Recipe& recipe, const parallel::LaunchInfo& launch,
                                parallel::Communicator& world, std::ostream& out) {
  const auto& d = recipe.data;
  if (!d.mock) check_index_fits(recipe);
  const data::TokenizerSpec tspec = data::tokenizer_spec(recipe);
  // NullTokenizer (pre-tokenized data) only fixes the vocabulary size; mock data with
  // model.vocab_size set needs no tokenizer file either.
  TrainingData t;
  t.vocab_size = recipe.model.vocab_size;
  if (tspec.type == config::TokenizerType::Null) {
    t.vocab_size = d.tokenizer.vocab_size;
    out << "tokenizer: NullTokenizer (pre-tokenized data, vocab " << t.vocab_size << ")\n";
  } else if (!d.mock || t.vocab_size == 0) {
    t.tokenizer = data::make_tokenizer(tspec);
    out << "tokenizer: " << t.tokenizer->describe() << "\n";
    t.vocab_size = t.tokenizer->vocab_size();
  }
  Sources s;
  if (d.mock) {
    s = mock_sources(recipe, t.vocab_size, out);
  } else if (d.sft.enabled()) {
    s = sft_sources(recipe, *t.tokenizer, out);
  } else if (recipe.model.arch == config::Arch::BERT) {
    MT_INPUT_CHECK(t.tokenizer != nullptr, recipe.source_path,
                   ": data.tokenizer.type: BERT data needs a WordPiece vocabulary "
                   "(BertWordPieceLowerCase or BertWordPieceCase), not NullTokenizer");
    s = bert_sources(recipe, *t.tokenizer, out);
  } else {
    s = gpt_sources(recipe, launch, world, out);
  }
  t.train = std::move(s.first);
  t.valid = std::move(s.second);
  out << "samples: train " << t.train->samples_per_epoch();
  if (t.valid) out << ", valid " << t.valid->samples_per_epoch();
  out << "\n";
  return t;
}

}  // namespace megatron::training
