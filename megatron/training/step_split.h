#pragma once
// Where each rank's step time goes, and which ranks are slow (issue 38's straggler reports):
//
//   data       preparing the step's micro-batches (the source's reads and the sampler)
//   compute    forward and backward, less the communication waited for inside them
//   comm       exposed communication outside the pipeline (tp, dp, cp, ep groups: the time this
//              rank was blocked in them, parallel/timed_communicator.h)
//   pipeline   waits on the pipeline group (activations in flight and the bubble)
//   optimizer  loss reduction, gradient norm, the update and its weight refresh, less their
//              communication
//
// TimedGroups wraps the trainer's groups (every group once, aliases kept) so that the
// communication is counted; StepTimer splits one step from it. Every `logging.straggler_interval`
// steps gather_stragglers() collects each rank's split over the interval on world rank 0, which
// ranks the ranks by busy time (data + compute + optimizer: the time not spent waiting for
// others) against the median. On CUDA the split sees the host side only (kernels and NCCL run
// asynchronously on the device stream).
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "megatron/training/groups.h"

namespace megatron::training {

struct StepSplit {
  double data = 0, compute = 0, comm = 0, pipeline = 0, optimizer = 0, step = 0;
  double busy() const { return data + compute + optimizer; }
  StepSplit& operator+=(const StepSplit& o);
  StepSplit scaled(double f) const;
};

// The trainer's groups behind timed communicators: pipeline (pp) time apart from the rest.
class TimedGroups {
 public:
  explicit TimedGroups(const TrainerGroups& groups);
  ~TimedGroups();
  const TrainerGroups& groups() const { return groups_; }
  double pipeline_seconds() const { return pipeline_; }
  double other_seconds() const { return other_; }

 private:
  std::vector<std::unique_ptr<parallel::Communicator>> owned_;
  TrainerGroups groups_;
  double pipeline_ = 0, other_ = 0;
};

// Marks the phases of one step: construct at its start, mark() after data, compute and
// optimizer in that order; split() gives the step's StepSplit.
class StepTimer {
 public:
  explicit StepTimer(const TimedGroups& groups);
  std::chrono::steady_clock::time_point start() const { return start_; }
  enum class Phase { Data, Compute, Optimizer };
  void mark(Phase phase);
  const StepSplit& split() const { return split_; }

 private:
  const TimedGroups& groups_;
  std::chrono::steady_clock::time_point start_, last_;
  double last_pipeline_, last_other_;
  StepSplit split_;
};

struct RankSplit {
  int rank = 0;
  StepSplit per_step;  // the interval's mean per step
  double ratio = 0;    // busy time / the median rank's
};
struct StragglerReport {
  int64_t first_iteration = 0, last_iteration = 0;
  double median_busy = 0;
  std::vector<RankSplit> ranks;                  // slowest (by busy time) first
  std::string describe(size_t count = 3) const;  // the console line: the `count` slowest ranks
  nlohmann::json to_json() const;                // the JSONL event's fields
};

// Collective over world: every rank's split summed over `steps` steps [first, last]; the report
// on world rank 0 (nullopt elsewhere).
std::optional<StragglerReport> gather_stragglers(parallel::Communicator& world,
                                                 const StepSplit& sum, int64_t steps, int64_t first,
                                                 int64_t last);

}  // namespace megatron::training
