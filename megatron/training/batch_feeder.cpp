#include "megatron/training/batch_feeder.h"

#include "megatron/optimizer/optimizer.h"

namespace megatron::training {

namespace {

// Rows [first * C, (first + 1) * C) then [second * C, (second + 1) * C) of an [S, B] int32 tensor.
Tensor chunk_rows(const Tensor& t, const kernels::ContextChunks& ch) {
  const int64_t C = ch.chunk;
  Tensor out = Tensor::empty({2 * C, t.dim(1)}, t.dtype());
  out.slice(0, C).copy_from(t.slice(ch.first * C, (ch.first + 1) * C));
  out.slice(C, 2 * C).copy_from(t.slice(ch.second * C, (ch.second + 1) * C));
  return out;
}

// Context parallelism: mb keeps its cp rank's chunks of tokens, labels and positions (the
// global ones; a packed batch's per-document ones), and its segment ids whole (attention reads
// the documents of every key).
void keep_context_chunks(models::MicroBatch& mb, int64_t cp, int64_t rank) {
  const int64_t S = mb.tokens.dim(0), B = mb.tokens.dim(1);
  const auto ch = kernels::ContextChunks::of(S, cp, rank);
  MT_CHECK(S % (2 * cp) == 0, "sequence ", S, " not divisible by 2 * context parallel size ", cp);
  MT_CHECK(!models::present(mb.token_types) && !models::present(mb.padding_mask),
           "context parallelism takes decoder batches (no token types or padding masks)");
  if (!models::present(mb.position_ids)) {
    mb.position_ids = Tensor::empty({S, B}, DType::I32);
    models::fill_positions(mb.position_ids, 0);
  }
  mb.tokens = chunk_rows(mb.tokens, ch);
  mb.labels = chunk_rows(mb.labels, ch);
  mb.position_ids = chunk_rows(mb.position_ids, ch);
  mb.info.cp = ch;
}

// "a, b" from a data section's dataset paths (for messages).
std::string data_paths(const std::vector<config::DatasetEntry>& sources) {
  std::string s;
  for (const auto& d : sources) s += (s.empty() ? "" : ", ") + d.path;
  return s.empty() ? std::string("none") : s;
}
}  // namespace

std::string describe_data(const config::Recipe& recipe, bool training) {
  const auto& d = recipe.data;
  if (d.sft.enabled())
    return concat(training ? "training" : "validation", " data (data.sft.",
                  training || d.sft.valid.empty() ? "train: " : "valid: ",
                  data_paths(training || d.sft.valid.empty() ? d.sft.train : d.sft.valid), ")");
  return concat(training ? "training" : "validation",
                " data (data.train: ", d.mock ? std::string("mock") : data_paths(d.train), ")");
}

BatchFeeder::BatchFeeder(const config::Recipe& recipe, int64_t vocab_size,
                         parallel::Communicator& dp, parallel::Communicator& replicas,
                         parallel::Communicator& cp, Device device)
    : recipe_(recipe),
      vocab_size_(vocab_size),
      replicas_(&replicas),
      cp_(&cp),
      device_(device),
      sampler_{recipe.training.micro_batch_size, dp.size(), dp.rank()} {}

void BatchFeeder::fill(const BatchSource& source, int64_t consumed, int64_t rounds,
                       int64_t iteration, bool training,
                       std::vector<models::MicroBatch>& out) const {
  out.resize(static_cast<size_t>(rounds));
  for (int64_t m = 0; m < rounds; ++m) {
    models::MicroBatch& mb = out[static_cast<size_t>(m)];
    const int64_t first_sample = sampler_.first_sample(consumed, m);
    // The last step's chunks are no buffers to refill: the source fills whole sequences.
    if (cp_->size() > 1) mb = models::MicroBatch{};
    source.fill(first_sample, recipe_.training.micro_batch_size, mb);
    mb.info = MicroBatchInfo{iteration, sampler_.position(m), training};
    check_ids_in_vocabulary(mb, vocab_size_, first_sample,
                            [&] { return describe_data(recipe_, training); });
    if (cp_->size() > 1) keep_context_chunks(mb, cp_->size(), cp_->rank());
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
  optim::all_reduce_host(*replicas_, t, parallel::ReduceOp::Sum, device_);
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
