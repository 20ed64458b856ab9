#pragma once
// Where a training step's device time goes, op by op: while an OpProfiler is installed for a
// device, the ops' front end (ops*.cpp, through DeviceCall in op_checks.h) marks the start and
// the end of every op that device runs on the device's own clock (CUDA events on the current
// stream; the host clock on the CPU), so the times are the device's, not the launches'. Ops that
// other ops call inside themselves count in the outer one. report() adds the times up by op and
// by kind (GEMMs, attention, norms, ...) and keeps the time between ops apart: on a GPU that is
// the copies, collectives and host work the device waited for. Used by the trainer for
// `logging.profile` (training/step_profile.h).
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "megatron/core/op_clock.h"
#include "megatron/core/tensor.h"

namespace megatron::backend {

// The clock of `device`: the host's for the CPU, CUDA events on the current stream for CUDA (an
// error naming the build when it has no backend for the device).
std::unique_ptr<OpClock> make_op_clock(Device device);

struct OpTime {
  std::string op, kind;
  int64_t calls = 0;
  double seconds = 0;
};

struct OpProfileReport {
  std::vector<OpTime> ops;    // by time, longest first
  std::vector<OpTime> kinds;  // the same added up by kind (calls summed), longest first
  double op_seconds = 0;      // the ops' own time
  double between_seconds =
      0;  // from each segment's first op start to its last op end, not in an op
};

// The kind of an op, by its name: gemm (linear_*), attention, norm, loss, optimizer, moe,
// elementwise (the rest).
std::string op_kind(const std::string& op);

class OpProfiler {
 public:
  explicit OpProfiler(std::unique_ptr<OpClock> clock);
  // Only the outermost op of the calling thread is timed (the thread that made the profiler).
  void begin(const char* op);
  void end();
  // The time from the last op so far to the next one is not counted between ops: the trainer
  // calls it after each profiled step, whose host work until the next step is outside the steps'
  // wall time (counting it made "outside the ops" negative under load).
  void end_segment() { segment_break_ = true; }
  // Waits for the device, adds the marks up and starts afresh.
  OpProfileReport report();

 private:
  std::unique_ptr<OpClock> clock_;
  std::thread::id thread_;
  int depth_ = 0;
  std::vector<const char*> names_;    // one per timed op: its marks are 2i and 2i + 1
  std::vector<bool> segment_starts_;  // per timed op: the first after an end_segment()
  bool segment_break_ = false;
};

// The profiler of `device`'s ops, or nullptr (the usual case: no op is timed).
OpProfiler* op_profiler(Device device);
// Installs `profiler` (nullptr: none) for `device`, returns the one before. It must outlive its
// installation.
OpProfiler* set_op_profiler(Device device, OpProfiler* profiler);

// The report as text: one line of kinds, then the `top` longest ops.
std::string format_op_profile(const OpProfileReport& r, int64_t steps, int top = 8);

}  // namespace megatron::backend
