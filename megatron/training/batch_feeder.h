#pragma once
// A step's micro-batches for this rank: read from a BatchSource in Megatron's sampler order,
// ids checked against the vocabulary, cut to this context-parallel rank's chunks of every
// sequence, target counts summed over the global batch, and the tensors moved to the training
// device.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/training/batch_source.h"
#include "megatron/training/sampler.h"
#include "models/model.h"

namespace megatron::training {

// The run's training or validation data for messages, e.g. "training data (data.train: a, b)",
// "validation data (data.sft.valid: c)", "training data (data.train: mock)".
std::string describe_data(const config::Recipe& recipe, bool training);

class BatchFeeder {
 public:
  // dp: the data-parallel group (which samples); replicas: dp x cp (where target counts sum);
  // cp: the context-parallel group (which positions of them).
  BatchFeeder(const config::Recipe& recipe, int64_t vocab_size, parallel::Communicator& dp,
              parallel::Communicator& replicas, parallel::Communicator& cp, Device device);

  // `rounds` micro-batches of iteration `iteration` from `source`, the step starting after
  // `consumed` samples; `training` selects dropout (and names the data in errors).
  void fill(const BatchSource& source, int64_t consumed, int64_t rounds, int64_t iteration,
            bool training, std::vector<models::MicroBatch>& out) const;
  // The LM and auxiliary (sentence-pair) target counts of the global batch these micro-batches
  // (this rank's) belong to: every tp/pp rank of a data-parallel replica reads the same
  // samples, so the sum runs over data parallelism (and the context-parallel ranks, each holding
  // part of every sequence) only.
  std::pair<double, double> global_target_counts(
      const std::vector<models::MicroBatch>& batches) const;
  // The micro-batch with its tensors on the training device (the same tensors on the CPU).
  models::MicroBatch on_device(const models::MicroBatch& mb) const;
  const PretrainingSampler& sampler() const { return sampler_; }

 private:
  const config::Recipe& recipe_;
  int64_t vocab_size_;
  parallel::Communicator* replicas_;
  parallel::Communicator* cp_;
  Device device_;
  PretrainingSampler sampler_;
};

}  // namespace megatron::training
