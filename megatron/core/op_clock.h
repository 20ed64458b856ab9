#pragma once
// Timestamps on a device's own clock, for timing the work a device runs (the ops' profiler,
// megatron/backend/op_profiler.h). The interface sits here, below the device backends, so that
// each backend can implement it (CUDA: events on the current stream).
#include <cstdint>
#include <vector>

namespace megatron {

// mark() queues a timestamp behind the work already queued on the device; resolve() waits for
// them and returns each in seconds after the first, then forgets them.
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual void mark() = 0;
  virtual std::vector<double> resolve() = 0;
};

// The host clock (steady_clock): right for the CPU backend, whose ops are done when they return.
class HostOpClock final : public OpClock {
 public:
  void mark() override;
  std::vector<double> resolve() override;

 private:
  std::vector<int64_t> ns_;
};

}  // namespace megatron
