#pragma once
// Where training samples come from. A BatchSource fills [S, B] micro-batches from sample indices
// first, first + 1, ...; indices grow without bound and sources cycle epochs.
//   SampleSource: token windows (GPT/LLaMA): sample i is seq_length + 1 ids, the inputs and the
//                 labels shifted by one.
//   BertBatchSource (bert_source.h): masked-LM samples with token types, padding and the
//                 sentence-pair label.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "models/model.h"

namespace megatron::training {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual int64_t seq_length() const = 0;
  virtual int64_t samples_per_epoch() const = 0;
  // Fills mb (reusing its tensors when shapes match) from samples first .. first + B - 1.
  virtual void fill(int64_t first_sample, int64_t micro_batch_size,
                    models::MicroBatch& mb) const = 0;
};

class SampleSource : public BatchSource {
 public:
  virtual void get(int64_t index, int32_t* tokens) const = 0;  // seq_length + 1 ids
  void fill(int64_t first_sample, int64_t micro_batch_size, models::MicroBatch& mb) const override;
};

// Fills a [S, B] micro-batch from token windows (tokens[s, b] = sample[s], labels[s, b] =
// sample[s + 1]). Reuses the micro-batch's tensors when shapes match.
void fill_micro_batch(const SampleSource& source, int64_t first_sample, int64_t micro_batch_size,
                      models::MicroBatch& mb);

// Every token and label id (labels: except kIgnoreIndex) must lie in [0, vocab_size), on every
// layout: under tensor parallelism an id in the vocabulary padding or beyond would meet a zero
// embedding row and a loss term no vocabulary shard sees, and training would go on in silence.
// InputError naming the data (describe_data(), e.g. "training data (data.train: a, b)", built
// only for the message) and the first sample.
void check_ids_in_vocabulary(const models::MicroBatch& mb, int64_t vocab_size, int64_t first_sample,
                             const std::function<std::string()>& describe_data);

}  // namespace megatron::training
