#include "megatron/backend/cuda/stream.h"

#include <utility>

#include "megatron/backend/cuda/check.h"

namespace megatron::cuda {

Stream::Stream(bool non_blocking, int priority) {
  MT_CUDA_CHECK(cudaGetDevice(&device_));
  MT_CUDA_CHECK(cudaStreamCreateWithPriority(
      &stream_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // queued work still completes
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::synchronize() const { MT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool Stream::query() const {
  const cudaError_t status = cudaStreamQuery(stream_);
  if (status == cudaErrorNotReady) return false;
  MT_CUDA_CHECK(status);
  return true;
}

void Stream::wait(const Event& event) const {
  MT_CUDA_CHECK(cudaStreamWaitEvent(stream_, event.get(), 0));
}

void Stream::wait(cudaStream_t other) const {
  if (other == stream_) return;
  Event e;
  e.record(other);
  wait(e);  // destroying a recorded event right away is fine: the wait is already queued
}

Event::Event(bool timing) {
  MT_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) { MT_CUDA_CHECK(cudaEventRecord(event_, stream)); }

void Event::synchronize() const { MT_CUDA_CHECK(cudaEventSynchronize(event_)); }

bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  MT_CUDA_CHECK(status);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.0f;
  MT_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace megatron::cuda
