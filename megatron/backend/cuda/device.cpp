#include "megatron/backend/cuda/device.h"

#include "megatron/backend/cuda/check.h"

namespace megatron::cuda {

int device_count() {
  int n = 0;
  // No driver or no device is a normal answer here, not an error.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void set_device(int device) { MT_CUDA_CHECK(cudaSetDevice(device)); }

int current_device() {
  int device = 0;
  MT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

int select_device_for_local_rank(int local_rank) {
  MT_CHECK(local_rank >= 0, "select_device_for_local_rank: negative local rank ", local_rank);
  const int n = device_count();
  MT_CHECK(n > 0, "no CUDA device is visible to local rank ", local_rank,
           " (cudaGetDeviceCount found none: check the driver, CUDA_VISIBLE_DEVICES and the "
           "job's GPU allocation, or run with training.device=cpu)");
  const int device = local_rank % n;
  set_device(device);
  return device;
}

void synchronize_device() { MT_CUDA_CHECK(cudaDeviceSynchronize()); }

void memory_info(size_t* free_bytes, size_t* total_bytes) {
  MT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

int compute_capability(int device) {
  int major = 0, minor = 0;
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor;
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) MT_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  MT_CHECK(bytes <= bytes_, "copy of ", bytes, " bytes into a ", bytes_, "-byte device buffer");
  if (bytes) MT_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  MT_CHECK(bytes <= bytes_, "copy of ", bytes, " bytes out of a ", bytes_, "-byte device buffer");
  if (bytes) MT_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
}

void DeviceBuffer::zero() {
  if (bytes_) MT_CUDA_CHECK(cudaMemset(ptr_, 0, bytes_));
}

}  // namespace megatron::cuda
