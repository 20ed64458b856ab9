#pragma once
// Megatron's MegatronPretrainingSampler (dataloader_type "single"): samples are taken in index
// order; each micro-batch round takes the next micro_batch_size * dp_size indices and
// data-parallel rank r takes [r * mbs, (r + 1) * mbs) of them. A step (one global batch) is
// global_batch_size / (mbs * dp_size) rounds, so rank r's micro-batch m of the step that starts
// after `consumed` samples holds samples consumed + m * mbs * dp + r * mbs + [0, mbs). The ranks
// together cover each global batch exactly once, and a step depends only on the samples
// consumed before it (resume).
#include <cstdint>

namespace megatron::training {

struct PretrainingSampler {
  int64_t micro_batch_size = 1, dp_size = 1, dp_rank = 0;

  // Index within its global batch of this rank's micro-batch m's first sample (the batch
  // offset of layout-independent dropout).
  int64_t position(int64_t micro) const {
    return micro * micro_batch_size * dp_size + dp_rank * micro_batch_size;
  }
  // Its global sample index, `consumed` samples having been taken before the step.
  int64_t first_sample(int64_t consumed, int64_t micro) const { return consumed + position(micro); }
  // Micro-batch rounds that cover `samples` samples over all ranks.
  int64_t rounds(int64_t samples) const { return samples / (micro_batch_size * dp_size); }
};

}  // namespace megatron::training
