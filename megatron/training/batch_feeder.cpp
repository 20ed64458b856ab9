#include "megatron/training/batch_feeder.h"

#include "megatron/optimizer/optimizer.h"

namespace megatron::training {

namespace {
// "a, b" from a data section's dataset paths (for messages).
std::string data_paths(const std::vector<config::DatasetEntry>& sources) {
  std::string s;
  for (const auto& d : sources) s += (s.empty() ? "" : ", ") + d.path;
  return s.empty() ? std::string("none") : s;
}
}  // namespace

BatchFeeder::BatchFeeder(const config::Recipe& recipe, int64_t vocab_size,
                         parallel::Communicator& dp, Device device)
    : recipe_(recipe),
      vocab_size_(vocab_size),
      dp_(&dp),
      device_(device),
      sampler_{recipe.training.micro_batch_size, dp.size(), dp.rank()} {}

void BatchFeeder::fill(const BatchSource& source, int64_t consumed, int64_t rounds,
                       int64_t iteration, bool training,
                       std::vector<models::MicroBatch>& out) const {
  out.resize(static_cast<size_t>(rounds));
  for (int64_t m = 0; m < rounds; ++m) {
    models::MicroBatch& mb = out[static_cast<size_t>(m)];
    const int64_t first_sample = sampler_.first_sample(consumed, m);
    source.fill(first_sample, recipe_.training.micro_batch_size, mb);
    mb.info = MicroBatchInfo{iteration, sampler_.position(m), training};
    check_ids_in_vocabulary(mb, vocab_size_, first_sample, [&] {
      const auto& d = recipe_.data;
      if (d.sft.enabled())
        return concat(training ? "training" : "validation", " data (data.sft.",
                      training || d.sft.valid.empty() ? "train: " : "valid: ",
                      data_paths(training || d.sft.valid.empty() ? d.sft.train : d.sft.valid), ")");
      return concat(training ? "training" : "validation",
                    " data (data.train: ", d.mock ? std::string("mock") : data_paths(d.train), ")");
    });
  }
}

std::pair<double, double> BatchFeeder::global_target_counts(
    const std::vector<models::MicroBatch>& batches) const {
  double counts[2] = {0.0, 0.0};
  for (const models::MicroBatch& mb : batches) {
    counts[0] += static_cast<double>(models::count_lm_targets(mb));
    counts[1] += static_cast<double>(models::count_aux_targets(mb));
  }
  Tensor t = Tensor::wrap(counts, {2}, DType::F64);
  optim::all_reduce_host(*dp_, t, parallel::ReduceOp::Sum, device_);
  return {counts[0], counts[1]};
}

models::MicroBatch BatchFeeder::on_device(const models::MicroBatch& mb) const {
  // The sources fill host tensors; a device run copies each field (to() is the tensor itself on
  // its own device, so the CPU path keeps using the host batch).
  if (device_ == Device::CPU) return mb;
  auto move = [this](const Tensor& t) { return models::present(t) ? t.to(device_) : t; };
  models::MicroBatch out;
  out.tokens = move(mb.tokens);
  out.labels = move(mb.labels);
  out.token_types = move(mb.token_types);
  out.padding_mask = move(mb.padding_mask);
  out.nsp_labels = move(mb.nsp_labels);
  out.position_ids = move(mb.position_ids);
  out.segment_ids = move(mb.segment_ids);
  out.info = mb.info;
  return out;
}

}  // namespace megatron::training
