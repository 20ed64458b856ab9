#include "data/data_loader.h"

#include "megatron/core/error.h"

namespace megatron::data {

DataLoader::DataLoader(std::shared_ptr<const SampleDataset> dataset, const DataLoaderConfig& config)
    : dataset_(std::move(dataset)), config_(config) {
  MT_CHECK(dataset_ != nullptr, "DataLoader needs a dataset");
  const auto& c = config_;
  MT_INPUT_CHECK(c.micro_batch_size >= 1, "data loader: micro_batch_size must be >= 1, got ",
                 c.micro_batch_size);
  MT_INPUT_CHECK(c.dp_size >= 1, "data loader: dp_size must be >= 1, got ", c.dp_size);
  MT_INPUT_CHECK(c.dp_rank >= 0 && c.dp_rank < c.dp_size, "data loader: dp_rank ", c.dp_rank,
                 " is outside [0, ", c.dp_size, ")");
  MT_INPUT_CHECK(
      c.global_batch_size >= 1 && c.global_batch_size % (c.micro_batch_size * c.dp_size) == 0,
      "data loader: global_batch_size ", c.global_batch_size,
      " is not a positive multiple of micro_batch_size x dp_size = ", c.micro_batch_size, " x ",
      c.dp_size);
  MT_INPUT_CHECK(c.consumed_samples >= 0, "data loader: consumed_samples must be >= 0, got ",
                 c.consumed_samples);
  MT_INPUT_CHECK(c.prefetch_steps >= 0, "data loader: prefetch_steps must be >= 0, got ",
                 c.prefetch_steps);
  total_ = c.total_samples.value_or(dataset_->num_samples());
  MT_INPUT_CHECK(total_ >= 0 && total_ <= dataset_->num_samples(), "data loader: total_samples ",
                 total_, " exceeds the ", dataset_->num_samples(), " samples of ",
                 dataset_->describe());
  num_micro_ = c.global_batch_size / (c.micro_batch_size * c.dp_size);
  consumed_ = c.consumed_samples;
  produce_next_ = c.consumed_samples;
  if (c.prefetch_steps > 0) thread_ = std::thread([this] { produce(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<int64_t> DataLoader::micro_batch_indices(int64_t consumed, int64_t micro,
                                                     int64_t micro_batch_size, int64_t dp_rank,
                                                     int64_t dp_size) {
  std::vector<int64_t> out(static_cast<size_t>(micro_batch_size));
  const int64_t first = consumed + micro * micro_batch_size * dp_size + dp_rank * micro_batch_size;
  for (int64_t b = 0; b < micro_batch_size; ++b) out[static_cast<size_t>(b)] = first + b;
  return out;
}

StepBatch DataLoader::read_step(int64_t consumed_before) const {
  StepBatch s;
  s.consumed_before = consumed_before;
  s.micro_batch_size = config_.micro_batch_size;
  s.seq_length = dataset_->seq_length();
  const auto width = static_cast<size_t>(s.seq_length + 1);
  for (int64_t m = 0; m < num_micro_; ++m) {
    auto idx = micro_batch_indices(consumed_before, m, config_.micro_batch_size, config_.dp_rank,
                                   config_.dp_size);
    std::vector<int32_t> tokens(idx.size() * width);
    for (size_t b = 0; b < idx.size(); ++b) dataset_->get(idx[b], tokens.data() + b * width);
    s.micro_batches.push_back(std::move(tokens));
    s.sample_indices.push_back(std::move(idx));
  }
  return s;
}

void DataLoader::produce() {
  int64_t next = config_.consumed_samples;
  const auto capacity = static_cast<size_t>(config_.prefetch_steps);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || queue_.size() < capacity; });
      if (stop_) return;
    }
    Item item;
    try {
      if (next + config_.global_batch_size <= total_) {
        item.batch = read_step(next);
        next += config_.global_batch_size;
      }
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool last = !item.batch.has_value();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    cv_.notify_all();
    if (last) return;
  }
}

std::optional<StepBatch> DataLoader::next() {
  if (terminal_) {
    if (terminal_->error) std::rethrow_exception(terminal_->error);
    return std::nullopt;
  }
  Item item;
  if (!thread_.joinable()) {
    try {
      if (produce_next_ + config_.global_batch_size <= total_) {
        item.batch = read_step(produce_next_);
        produce_next_ += config_.global_batch_size;
      }
    } catch (...) {
      item.error = std::current_exception();
    }
  } else {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    cv_.notify_all();
  }
  if (!item.batch) {
    terminal_ = std::move(item);
    if (terminal_->error) std::rethrow_exception(terminal_->error);
    return std::nullopt;
  }
  consumed_ += config_.global_batch_size;
  return std::move(item.batch);
}

}  // namespace megatron::data
