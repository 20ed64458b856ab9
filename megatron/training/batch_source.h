#pragma once
// Where training samples come from: sample i of a split is seq_length + 1 token ids (inputs and
// the labels shifted by one). Sample indices grow without bound; sources cycle epochs.
#include <cstdint>
#include <memory>

#include "models/gpt/gpt_model.h"

namespace megatron::training {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t seq_length() const = 0;
  virtual int64_t samples_per_epoch() const = 0;
  virtual void get(int64_t index, int32_t* tokens) const = 0;  // seq_length + 1 ids
};

// Fills a [S, B] micro-batch from samples first, first + 1, ... (tokens[s, b] = sample[s],
// labels[s, b] = sample[s + 1]). Reuses the micro-batch's tensors when shapes match.
void fill_micro_batch(const SampleSource& source, int64_t first_sample, int64_t micro_batch_size,
                      models::MicroBatch& mb);

}  // namespace megatron::training
