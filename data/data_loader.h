#pragma once
// The pretraining loader: Megatron's MegatronPretrainingSampler (dataloader_type "single") plus a
// background thread that prepares the next steps.
//
// Assignment. Samples are taken in index order from consumed_samples on. Each micro-batch round
// takes the next micro_batch_size * dp_size sample indices; data-parallel rank r gets
// [r * mbs, (r + 1) * mbs) of them. A step (one global batch) is
// num_microbatches = global_batch_size / (micro_batch_size * dp_size) rounds, so rank r's
// micro-batch m of the step starting at consumed sample c holds samples
//     c + m * mbs * dp + r * mbs + [0, mbs).
// The ranks together cover each global batch exactly once; a step depends only on the number of
// samples consumed before it, so a loader built with consumed_samples = k * global_batch_size
// yields exactly the steps k, k+1, ... of an uninterrupted run (resume).
// The loader ends (next() returns nullopt) when fewer than global_batch_size samples remain
// (Megatron's drop_last); total_samples defaults to the dataset's num_samples().
//
// Prefetch. With prefetch_steps > 0 a background thread fills up to that many steps ahead
// (bounded queue). An exception thrown while reading samples is rethrown by next() (and by every
// later call) in the consumer's thread. The destructor stops and joins the thread, even when the
// queue is full. With prefetch_steps = 0, next() reads synchronously.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "data/gpt_dataset.h"

namespace megatron::data {

struct DataLoaderConfig {
  int64_t global_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t dp_rank = 0;
  int64_t dp_size = 1;
  int64_t consumed_samples = 0;          // samples consumed before the first step (all ranks)
  int64_t prefetch_steps = 2;            // 0: no background thread
  std::optional<int64_t> total_samples;  // unset: dataset->num_samples()
};

// One step's data for this rank.
struct StepBatch {
  int64_t consumed_before = 0;  // samples consumed (all ranks) before this step
  int64_t micro_batch_size = 0;
  int64_t seq_length = 0;
  // micro_batches[m]: micro_batch_size samples of seq_length + 1 ids, sample-major
  // ([b * (seq_length + 1) + t] = token t of sample b).
  std::vector<std::vector<int32_t>> micro_batches;
  std::vector<std::vector<int64_t>> sample_indices;  // the dataset indices, same layout
};

class DataLoader {
 public:
  // InputError when a batch size is < 1, global_batch_size is not a multiple of
  // micro_batch_size * dp_size, dp_rank is outside [0, dp_size), consumed_samples < 0, or
  // total_samples exceeds the dataset.
  DataLoader(std::shared_ptr<const SampleDataset> dataset, const DataLoaderConfig& config);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next step's micro-batches for this rank; nullopt once fewer than global_batch_size
  // samples remain. Rethrows a reading error.
  std::optional<StepBatch> next();

  // Samples consumed (all ranks) after the steps next() has returned: the value to checkpoint.
  int64_t consumed_samples() const { return consumed_; }
  int64_t num_microbatches() const { return num_micro_; }
  int64_t total_samples() const { return total_; }
  const DataLoaderConfig& config() const { return config_; }

  // The dataset indices of rank dp_rank's micro-batch `micro` of the step starting at `consumed`.
  static std::vector<int64_t> micro_batch_indices(int64_t consumed, int64_t micro,
                                                  int64_t micro_batch_size, int64_t dp_rank,
                                                  int64_t dp_size);

 private:
  StepBatch read_step(int64_t consumed_before) const;
  void produce();

  std::shared_ptr<const SampleDataset> dataset_;
  DataLoaderConfig config_;
  int64_t num_micro_ = 0;
  int64_t total_ = 0;
  int64_t consumed_ = 0;  // consumer side

  // Producer state (guarded by mu_).
  std::mutex mu_;
  std::condition_variable cv_;
  struct Item {
    std::optional<StepBatch> batch;  // nullopt: the end
    std::exception_ptr error;
  };
  std::deque<Item> queue_;
  bool stop_ = false;
  std::optional<Item> terminal_;  // the end or the error, once reached by the consumer
  int64_t produce_next_ = 0;      // synchronous mode: next step's consumed_before
  std::thread thread_;
};

}  // namespace megatron::data
