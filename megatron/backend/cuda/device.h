#pragma once
// CUDA device plumbing behind a CUDA-free interface, so host code and tests can ask for a GPU
// and move bytes without including CUDA headers. Built only with MEGATRON_WITH_CUDA.
#include <cstddef>
#include <string>

namespace megatron::cuda {

// Number of usable GPUs; 0 when there is no driver or device (never throws for that case).
int device_count();
std::string device_name(int device);
void set_device(int device);

// Device memory owned RAII-style (the stream-ordered caching allocator comes with the backend).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace megatron::cuda
