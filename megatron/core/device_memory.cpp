#include "megatron/core/device_memory.h"

#include <array>
#include <atomic>

#include "megatron/core/error.h"
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
