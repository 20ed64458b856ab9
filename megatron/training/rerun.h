#pragma once
// Re-running a suspicious step (training.rerun_mode; Megatron's rerun state machine, reduced to
// what one process can tell): a step whose loss or gradient norm is not finite, or whose loss
// exceeds training.rerun_spike_factor x the mean of the last accepted losses, is run again on
// the same micro-batches from the same weights (dropout masks and data are functions of the
// iteration, so an honest re-run gives the same bits). Then:
//   - the re-run differs: a transient fault (a flipped bit, a bad core). Named with the ranks
//     whose own loss sum or gradient differed; the re-run's result is used if it is healthy.
//   - it repeats: a property of the data or the state. Named with the step's global sample
//     indices and the training data; validate stops the run with that message (or, with
//     training.rerun_skip_batch, skips the batch), report logs it and goes on.
// training.error_injection_* makes such faults on purpose (NaN loss and gradients on one rank at
// one iteration: only in the first run, or in every run) to test the above.
#include <cstdint>
#include <deque>
#include <ostream>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"

namespace megatron::training {

// What one rank computed in a step: its own loss sum and the sum of squares of its gradients.
struct RankResult {
  double loss_sum = 0, grad_sum_squares = 0;
};

class StepRerun {
 public:
  StepRerun(const config::Recipe& recipe, parallel::Communicator& world);

  bool enabled() const { return mode_ != config::RerunMode::Disabled; }
  // Why a step with this loss and gradient norm needs a re-run ("" when it does not).
  std::string suspicious(double loss, double grad_norm) const;
  // An accepted step's loss (the history a spike is measured against).
  void accept(double loss);
  // Whether the injected fault hits this rank's run of `iteration` (rerun: its second run).
  bool inject(int64_t iteration, bool rerun) const;

  struct Verdict {
    bool repeated = false;    // the re-run gave the same bits
    std::string message;      // the report (every rank has it)
    bool stop = false;        // validate: a repeated fault ends the run
    bool skip_batch = false;  // validate + rerun_skip_batch: the batch is skipped instead
  };
  // Collective over the world: compares every rank's first and second result.
  // `first` / `second`: the step's global loss and gradient norm of each run; `samples`: the
  // global sample indices [begin, end) and the data they come from, for the message.
  Verdict judge(int64_t iteration, const std::string& why, const RankResult& mine_first,
                const RankResult& mine_second, double loss_first, double loss_second,
                double norm_first, double norm_second, const std::string& samples) const;

 private:
  config::RerunMode mode_;
  double spike_factor_;
  bool skip_batch_;
  config::ErrorInjection injection_;
  int64_t injection_iteration_, injection_rank_;
  parallel::Communicator* world_;
  std::deque<double> recent_;  // the last accepted losses
};

// "global samples A-B of the training data (data.train: x, y)": where a step's batch came from
// (batch_feeder.h's describe_data).
std::string describe_samples(const config::Recipe& recipe, int64_t first, int64_t count);

}  // namespace megatron::training
