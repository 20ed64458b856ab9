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
int current_device();
// Picks and sets the GPU of a process from its node-local rank: local_rank % device_count().
// Returns the device chosen. Throws a clear error when the node has no usable GPU or
// local_rank < 0. (Several ranks per GPU are allowed here; NCCL rejects them, see
// nccl_communicator.h.)
int select_device_for_local_rank(int local_rank);
// Blocks until all work on the current device is done.
void synchronize_device();
// Free and total bytes of the current device (cudaMemGetInfo).
void memory_info(size_t* free_bytes, size_t* total_bytes);
// Compute capability major * 10 + minor of `device` (80 for A100, 90 for H100).
int compute_capability(int device);

// Device memory owned RAII-style with plain cudaMalloc/cudaFree (set-up and tests; the training
// loop allocates through CachingAllocator, allocator.h).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  // Synchronous copies (legacy default stream: they wait for all prior work on blocking streams).
  void copy_from_host(const void* src, size_t bytes);
  void copy_to_host(void* dst, size_t bytes) const;
  void zero();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace megatron::cuda
