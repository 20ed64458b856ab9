#pragma once
// Synthetic batches (Megatron's --mock-data): a recipe runs end to end without data files, for
// throughput measurements, smoke tests of full-size recipes at reduced size, and CI. Samples are
// pure functions of (seed, index), so every rank and every layout sees the same data.
//   MockTokenSource: GPT/LLaMA token windows with learnable structure (each sample repeats a
//                    short random motif), so the loss visibly falls.
//   MockBertSource:  BERT samples: [CLS] A [SEP] B [SEP] + padding, ~15% of the real tokens
//                    masked (labels = the original ids), token types, NSP labels.
#include <cstdint>

#include "megatron/training/batch_source.h"

namespace megatron::training {

class MockTokenSource final : public SampleSource {
 public:
  MockTokenSource(int64_t seq_length, int64_t vocab_size, uint64_t seed,
                  int64_t samples_per_epoch = int64_t{1} << 20);
  int64_t seq_length() const override { return seq_length_; }
  int64_t samples_per_epoch() const override { return samples_; }
  void get(int64_t index, int32_t* tokens) const override;

 private:
  int64_t seq_length_, vocab_, samples_;
  uint64_t seed_;
};

class MockBertSource final : public BatchSource {
 public:
  // Ids 0..4 play [PAD], [CLS], [SEP], [MASK] and an unused id; words are drawn from 5..vocab-1.
  MockBertSource(int64_t seq_length, int64_t vocab_size, uint64_t seed, bool binary_head,
                 int64_t samples_per_epoch = int64_t{1} << 20);
  int64_t seq_length() const override { return seq_length_; }
  int64_t samples_per_epoch() const override { return samples_; }
  void fill(int64_t first_sample, int64_t micro_batch_size, models::MicroBatch& mb) const override;

 private:
  int64_t seq_length_, vocab_, samples_;
  uint64_t seed_;
  bool binary_head_;
};

}  // namespace megatron::training
