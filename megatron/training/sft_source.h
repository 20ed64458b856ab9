#pragma once
// data.sft as the trainer's batch sources: one SFTDataset (data/sft_dataset.h) per JSONL file,
// several blended by weight with Megatron's blending index. A micro-batch's labels are the next
// tokens where the loss mask is on and models::kIgnoreIndex elsewhere, so the trainer's loss is
// normalised by the trained tokens of the whole global batch; packed samples also carry their
// per-conversation position ids and segment ids (models::MicroBatch).
#include <cstdint>
#include <memory>
#include <ostream>
#include <vector>

#include "data/sft_dataset.h"
#include "data/tokenizer.h"
#include "megatron/config/recipe.h"
#include "megatron/training/batch_source.h"

namespace megatron::training {

class SFTBatchSource final : public BatchSource {
 public:
  // weights > 0 (normalised here); samples: the blend's size (the single dataset's own size
  // when there is one).
  SFTBatchSource(std::vector<std::shared_ptr<const data::SFTDataset>> datasets,
                 std::vector<double> weights, int64_t samples);
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  int64_t samples_per_epoch() const override { return samples_; }
  void fill(int64_t first_sample, int64_t micro_batch_size, models::MicroBatch& mb) const override;
  // The sample behind global index i (cycling over the epoch).
  data::SFTSample sample(int64_t index) const;

 private:
  std::vector<std::shared_ptr<const data::SFTDataset>> datasets_;
  int64_t samples_ = 0;
  bool packed_ = false;
  std::vector<int16_t> dataset_index_;         // blend: empty for one dataset
  std::vector<int64_t> dataset_sample_index_;  // blend: empty for one dataset
};

// The train and validation sources of data.sft (validation null without eval_iters or a
// validation split). Progress and descriptions go to `out`.
std::pair<std::shared_ptr<const BatchSource>, std::shared_ptr<const BatchSource>> sft_sources(
    const config::Recipe& recipe, const data::Tokenizer& tokenizer, std::ostream& out);

}  // namespace megatron::training
