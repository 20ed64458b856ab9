#pragma once
// BERT pretraining batches from a data::BERTDataset: tokens, token types, MLM labels (-100 where
// not masked), the padding mask and the sentence-pair (NSP) label per sample.
#include <memory>

#include "data/bert_dataset.h"
#include "megatron/training/batch_source.h"

namespace megatron::training {

class BertBatchSource final : public BatchSource {
 public:
  explicit BertBatchSource(std::shared_ptr<const data::BERTDataset> dataset);
  int64_t seq_length() const override { return dataset_->seq_length(); }
  int64_t samples_per_epoch() const override { return dataset_->num_samples(); }
  // Sample i is the dataset's sample i mod samples_per_epoch() (the mapping already spans the
  // epochs the run needs). Without a binary head nsp_labels stays empty.
  void fill(int64_t first_sample, int64_t micro_batch_size, models::MicroBatch& mb) const override;

 private:
  std::shared_ptr<const data::BERTDataset> dataset_;
};

}  // namespace megatron::training
