#include "megatron/training/bert_source.h"

namespace megatron::training {

BertBatchSource::BertBatchSource(std::shared_ptr<const data::BERTDataset> dataset)
    : dataset_(std::move(dataset)) {
  MT_CHECK(dataset_ && dataset_->num_samples() > 0, "BERT batch source without samples");
  static_assert(data::kBertIgnoreLabel == models::kIgnoreIndex);
}

void BertBatchSource::fill(int64_t first_sample, int64_t micro_batch_size,
                           models::MicroBatch& mb) const {
  const int64_t S = seq_length(), B = micro_batch_size;
  int32_t* tokens = ensure(mb.tokens, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* types = ensure(mb.token_types, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  int32_t* labels = ensure(mb.labels, {S, B}, DType::I32, Device::CPU).data<int32_t>();
  uint8_t* padding = ensure(mb.padding_mask, {B, S}, DType::U8, Device::CPU).data<uint8_t>();
  const bool binary_head = dataset_->config().binary_head;
  int32_t* nsp =
      binary_head ? ensure(mb.nsp_labels, {B}, DType::I32, Device::CPU).data<int32_t>() : nullptr;
  if (!binary_head) mb.nsp_labels = Tensor();
  for (int64_t b = 0; b < B; ++b) {
    const data::BertSample sample = dataset_->get((first_sample + b) % samples_per_epoch());
    MT_CHECK(static_cast<int64_t>(sample.tokens.size()) == S, "BERT sample of length ",
             sample.tokens.size(), " for seq_length ", S);
    for (int64_t s = 0; s < S; ++s) {
      const auto i = static_cast<size_t>(s);
      tokens[s * B + b] = sample.tokens[i];
      types[s * B + b] = sample.token_types[i];
      labels[s * B + b] = sample.labels[i];
      padding[b * S + s] = sample.padding_mask[i];
    }
    if (nsp) nsp[b] = sample.is_random;
  }
}

}  // namespace megatron::training
