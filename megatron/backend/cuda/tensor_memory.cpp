#include "megatron/backend/cuda/tensor_memory.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>

#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/device.h"
#include "megatron/backend/cuda/runtime.h"
#include "megatron/core/tensor.h"

namespace megatron::cuda {
namespace {

class CudaTensorMemory final : public DeviceMemoryBackend {
 public:
  int device_count() override {
    // Asked once: the answer cannot change during the process (CUDA_VISIBLE_DEVICES is read at
    // initialisation).
    static const int count = megatron::cuda::device_count();
    return count;
  }

  DeviceAllocation allocate(size_t bytes) override {
    MT_CHECK(device_count() > 0, "allocating a ", bytes,
             "-byte cuda tensor: no CUDA device is visible to this process (check the driver, "
             "CUDA_VISIBLE_DEVICES and the job's GPU allocation, or use device cpu)");
    const int device = current_device();
    return {device_allocator(device).allocate(bytes, current_stream()), device};
  }

  void deallocate(const DeviceAllocation& block) noexcept override {
    try {
      device_allocator(block.device_index).free(block.ptr);
    } catch (const std::exception& e) {
      // A destructor cannot throw; a failure here is a bug (double free) or a dead context.
      std::fprintf(stderr, "megatron: freeing a cuda tensor failed: %s\n", e.what());
    }
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t bytes) override {
    const bool dst_host = dst_device == Device::CPU, src_host = src_device == Device::CPU;
    const cudaMemcpyKind kind =
        dst_host ? (src_host ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                 : (src_host ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
    const cudaStream_t stream = current_stream();
    MT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    if (dst_host || src_host) MT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void synchronize() override { MT_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

  void zero(void* ptr, size_t bytes) override {
    MT_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, current_stream()));
  }

  void* allocate_pinned_host(size_t bytes) override {
    if (device_count() == 0) return nullptr;
    void* p = nullptr;
    // Without page-locked memory the caller falls back to ordinary host memory.
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }

  void free_pinned_host(void* ptr) noexcept override {
    if (cudaFreeHost(ptr) != cudaSuccess)
      std::fprintf(stderr, "megatron: freeing page-locked host memory failed\n");
  }

  MemoryStats memory_stats() override {
    if (device_count() == 0) return {0, 0};
    const AllocatorStats s = device_allocator().stats();
    return {static_cast<int64_t>(s.current_bytes), static_cast<int64_t>(s.peak_bytes)};
  }
};

}  // namespace

DeviceMemoryBackend& tensor_memory() {
  static CudaTensorMemory* instance = new CudaTensorMemory();  // never destroyed
  return *instance;
}

DeviceMemoryBackend* register_tensor_memory() {
  return set_device_memory_backend(Device::CUDA, &tensor_memory());
}

}  // namespace megatron::cuda
