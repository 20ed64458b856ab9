#pragma once
// Owning wrappers of a CUDA stream and a CUDA event. Both are move-only and bound to the device
// that was current when they were created.
#include <cuda_runtime.h>

namespace megatron::cuda {

class Event;

class Stream {
 public:
  // A new stream on the current device. non_blocking: no implicit synchronisation with the
  // legacy default stream (what compute and communication streams want). priority: lower
  // numbers run first (cudaDeviceGetStreamPriorityRange); 0 is the default.
  explicit Stream(bool non_blocking = true, int priority = 0);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: passes straight to launchers
  int device() const { return device_; }

  void synchronize() const;
  // True when all work queued so far has completed.
  bool query() const;
  // Work queued on this stream after this call waits for `event` (no host blocking).
  void wait(const Event& event) const;
  // Shorthand: record an event on `other` and wait for it.
  void wait(cudaStream_t other) const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  // timing: whether elapsed_ms() works (timing events are slightly slower to record).
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream);
  void synchronize() const;  // blocks the host until the recorded work is done
  bool query() const;        // done?
  // Milliseconds between two recorded timing events (start.elapsed_ms(end)).
  float elapsed_ms(const Event& end) const;

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace megatron::cuda
