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

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) MT_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceBuffer::copy_from_host(const void* src, size_t bytes) {
  MT_CHECK(bytes <= bytes_, "copy of ", bytes, " bytes into a ", bytes_, "-byte device buffer");
  MT_CUDA_CHECK(cudaMemcpy(ptr_, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, size_t bytes) const {
  MT_CHECK(bytes <= bytes_, "copy of ", bytes, " bytes out of a ", bytes_, "-byte device buffer");
  MT_CUDA_CHECK(cudaMemcpy(dst, ptr_, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace megatron::cuda
