#pragma once
// logging.profile: the op-by-op time of training steps [profile_step_start, profile_step_end)
// (Megatron-Core's keys), on the training device's own clock (backend/op_profiler.h), printed
// after the last of them beside the steps' wall time, so a step splits into GEMMs, attention,
// the other kinds of op, the time between ops (copies, collectives, host work the device waited
// for) and the host time before the first op and after the last.
#include <memory>
#include <string>

#include "megatron/backend/op_profiler.h"
#include "megatron/config/recipe.h"

namespace megatron::training {

class StepProfile {
 public:
  StepProfile(const config::LoggingConfig& logging, Device device);
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // Call around every training step: the first profiled step installs the profiler; the last
  // returns the report (empty otherwise) and removes it.
  void before_step(int64_t iteration);
  std::string after_step(int64_t iteration, double step_seconds);

 private:
  int64_t start_ = 0, end_ = 0;  // [start_, end_), 1-based iterations
  Device device_;
  double wall_seconds_ = 0;
  std::unique_ptr<backend::OpProfiler> profiler_;  // while a profiled step runs
};

}  // namespace megatron::training
