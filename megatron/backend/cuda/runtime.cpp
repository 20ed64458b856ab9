#include "megatron/backend/cuda/runtime.h"

#include <array>
#include <mutex>

#include "kernels/cuda/gemm.h"
#include "megatron/backend/cuda/allocator.h"
#include "megatron/backend/cuda/device.h"

namespace megatron::cuda {
namespace {
thread_local cudaStream_t t_current_stream = nullptr;  // legacy default stream
}  // namespace

cudaStream_t current_stream() { return t_current_stream; }

StreamGuard::StreamGuard(cudaStream_t stream) : previous_(t_current_stream) {
  t_current_stream = stream;
}

StreamGuard::~StreamGuard() { t_current_stream = previous_; }

kernels::cuda::GemmContext& gemm_context() {
  const int device = current_device();
  constexpr int kMaxDevices = 64;
  MT_CHECK(device < kMaxDevices, "gemm_context: device ", device, " beyond ", kMaxDevices);
  static std::mutex mutex;
  static std::array<kernels::cuda::GemmContext*, kMaxDevices> contexts{};
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts[device] == nullptr)  // kept until exit, as device_allocator's allocators
    contexts[device] = new kernels::cuda::GemmContext(device_allocator(device));
  return *contexts[device];
}

}  // namespace megatron::cuda
