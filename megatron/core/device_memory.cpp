#include "megatron/core/device_memory.h"

#include <array>
#include <atomic>
#include <cstring>
#include <utility>

#include "megatron/core/error.h"
#include "megatron/core/host_memory.h"
#include "megatron/core/tensor.h"

namespace megatron {

namespace {
// The registry described in device_memory.h: one slot per Device (the CPU slot stays empty).
// Constant-initialised, so registrations made by static initialisers of other translation units
// are never lost to initialisation order.
constexpr size_t kDevices = 2;
std::array<std::atomic<DeviceMemoryBackend*>, kDevices> g_backends{};

std::atomic<DeviceMemoryBackend*>& slot(Device device) {
  const auto i = static_cast<size_t>(device);
  MT_CHECK(i < kDevices, "invalid device code ", i);
  return g_backends[i];
}
}  // namespace

DeviceMemoryBackend* device_memory_backend(Device device) {
  if (device == Device::CPU) return nullptr;
  return slot(device).load(std::memory_order_acquire);
}

DeviceMemoryBackend* set_device_memory_backend(Device device, DeviceMemoryBackend* backend) {
  MT_CHECK(device != Device::CPU, "CPU memory has no pluggable backend");
  return slot(device).exchange(backend, std::memory_order_acq_rel);
}

bool device_available(Device device) {
  if (device == Device::CPU) return true;
  DeviceMemoryBackend* backend = device_memory_backend(device);
  return backend != nullptr && backend->device_count() > 0;
}

}  // namespace megatron

namespace megatron {

PinnedHostBuffer::PinnedHostBuffer(size_t bytes, Device device) : bytes_(bytes) {
  if (bytes == 0) return;
  if (device != Device::CPU) {
    if (DeviceMemoryBackend* backend = device_memory_backend(device)) {
      ptr_ = backend->allocate_pinned_host(bytes);
      if (ptr_ != nullptr) backend_ = backend;
    }
  }
  if (ptr_ == nullptr) ptr_ = host_allocate(bytes);
  MT_CHECK(ptr_ != nullptr, "out of host memory allocating ", bytes, " bytes");
  std::memset(ptr_, 0, bytes);
}

void PinnedHostBuffer::release() noexcept {
  if (ptr_ == nullptr) return;
  if (backend_ != nullptr)
    backend_->free_pinned_host(ptr_);
  else
    host_deallocate(ptr_, bytes_);
  ptr_ = nullptr;
  backend_ = nullptr;
  bytes_ = 0;
}

PinnedHostBuffer::~PinnedHostBuffer() { release(); }

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      backend_(std::exchange(o.backend_, nullptr)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& o) noexcept {
  if (this != &o) {
    release();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    backend_ = std::exchange(o.backend_, nullptr);
  }
  return *this;
}

}  // namespace megatron
