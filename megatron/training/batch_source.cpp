#include "megatron/training/batch_source.h"

#include <vector>

#include "megatron/core/error.h"

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

void check_ids_in_vocabulary(const models::MicroBatch& mb, int64_t vocab_size, int64_t first_sample,
                             const std::function<std::string()>& describe_data) {
  const auto check = [&](const Tensor& ids, const char* what, bool allow_ignore) {
    if (!models::present(ids)) return;
    const int32_t* p = ids.data<int32_t>();
    for (int64_t i = 0; i < ids.numel(); ++i) {
      if (allow_ignore && p[i] == models::kIgnoreIndex) continue;
      MT_INPUT_CHECK(p[i] >= 0 && p[i] < vocab_size, describe_data(),
                     ": a micro-batch from sample ", first_sample, " holds ", what, " id ", p[i],
                     ", outside the model's vocabulary of ", vocab_size,
                     " (data tokenized with another tokenizer? model.vocab_size?)");
    }
  };
  check(mb.tokens, "token", false);
  check(mb.labels, "label", true);
}

}  // namespace megatron::training
