#include "megatron/training/batch_source.h"

#include <vector>

namespace megatron::training {

void SampleSource::fill(int64_t first_sample, int64_t micro_batch_size,
                        models::MicroBatch& mb) const {
  fill_micro_batch(*this, first_sample, micro_batch_size, mb);
}

void fill_micro_batch(const SampleSource& source, int64_t first_sample, int64_t micro_batch_size,
                      models::MicroBatch& mb) {
  const int64_t S = source.seq_length(), B = micro_batch_size;
  ensure(mb.tokens, {S, B}, DType::I32, Device::CPU);
  ensure(mb.labels, {S, B}, DType::I32, Device::CPU);
  std::vector<int32_t> sample(static_cast<size_t>(S + 1));
  int32_t* tokens = mb.tokens.data<int32_t>();
  int32_t* labels = mb.labels.data<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    source.get(first_sample + b, sample.data());
    for (int64_t s = 0; s < S; ++s) {
      tokens[s * B + b] = sample[s];
      labels[s * B + b] = sample[s + 1];
    }
  }
}

}  // namespace megatron::training
