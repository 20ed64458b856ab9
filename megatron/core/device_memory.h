#pragma once
// Memory of non-CPU devices for Tensor storage, behind an interface, so that megatron_core never
// links a device runtime: a CPU-only build has no implementation and a CUDA tensor there is a
// clear error; the CUDA backend (megatron/backend/cuda/tensor_memory.h) provides the
// implementation for Device::CUDA in CUDA builds.
//
// The registry below is the ONE piece of process-wide mutable state behind Tensor: a table of
// one backend pointer per Device, written by the backend's registration when the program
// starts (CUDA builds put megatron/backend/cuda/registration/register_tensor_memory.cpp into
// every executable that links megatron_cuda; see kernels/CMakeLists.txt) and otherwise only by
// tests that swap in a fake. CPU storage does not go through it.
#include <cstddef>
#include <cstdint>

namespace megatron {

enum class Device : uint8_t;

// Bytes currently held and the peak since start (for memory reports).
struct MemoryStats {
  int64_t current_bytes;
  int64_t peak_bytes;
};

// One block of device memory and the index of the device it lives on (for multi-GPU hosts:
// the block is returned to the allocator of that device).
struct DeviceAllocation {
  void* ptr = nullptr;
  int device_index = 0;
};

class DeviceMemoryBackend {
 public:
  virtual ~DeviceMemoryBackend() = default;
  // How many devices of this kind the process can use (0: none; never throws for that).
  virtual int device_count() = 0;
  // At least `bytes` bytes (bytes > 0) on the current device, ordered on the backend's current
  // stream; throws megatron::Error when there is no device or no memory.
  virtual DeviceAllocation allocate(size_t bytes) = 0;
  // Returns a block from allocate(). Must not throw (called from Storage's destructor).
  virtual void deallocate(const DeviceAllocation& block) noexcept = 0;
  // Copies `bytes` bytes; each side is host memory (Device::CPU) or memory of this backend's
  // device. Device-to-device copies are queued on the current stream (asynchronous for the
  // host); copies from or to host memory have completed when this returns, so the host buffer
  // may be read or reused at once.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t bytes) = 0;
  // Sets `bytes` bytes of device memory to zero (queued on the current stream).
  virtual void zero(void* ptr, size_t bytes) = 0;
  // Bytes handed out on the current device and their peak.
  virtual MemoryStats memory_stats() = 0;
  // Waits until the work queued on the device (the backend's current stream) has finished.
  virtual void synchronize() = 0;
  // Page-locked host memory (copies to and from the device run at full bus speed); null when
  // the backend has none, and callers fall back to ordinary host memory.
  virtual void* allocate_pinned_host(size_t bytes) {
    (void)bytes;
    return nullptr;
  }
  virtual void free_pinned_host(void* ptr) noexcept { (void)ptr; }
};

// The backend for `device` (never Device::CPU), or nullptr when none is registered (a build
// without that backend).
DeviceMemoryBackend* device_memory_backend(Device device);
// Installs `backend` (nullptr: none) for `device` and returns the previous one, so a test can
// put it back. The backend must outlive every storage allocated through it.
DeviceMemoryBackend* set_device_memory_backend(Device device, DeviceMemoryBackend* backend);

// A host buffer for copies to and from `device`: page-locked when its backend can, ordinary
// (64-byte aligned) host memory otherwise and for Device::CPU. Zeroed.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  PinnedHostBuffer(size_t bytes, Device device);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return backend_ != nullptr; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DeviceMemoryBackend* backend_ = nullptr;  // the pinned memory's owner, or null
};

// Whether tensors can be allocated on `device` here: always for the CPU; for CUDA, a CUDA
// build with at least one visible GPU.
bool device_available(Device device);

}  // namespace megatron
