#pragma once
// Per-thread execution state of the CUDA backend: the current stream that ops (backend/ops.h),
// CUDA tensor allocations and copies are queued on, and the per-device cuBLASLt context.
//
// The current stream defaults to the legacy default stream (0), which is also the default
// compute stream of NcclCommunicator; a StreamGuard switches it for a scope of one thread (as
// PyTorch's torch.cuda.stream). A CUDA tensor's memory belongs to the stream that was current
// when it was allocated: it is returned to that stream's free list when the tensor dies and may
// be reused at once by later work on that stream. A tensor also used on another stream must
// outlive that use in that stream's order (make its stream wait, e.g. Stream::wait, before the
// tensor dies), or the caching allocator's record_stream must be told (allocator.h).
#include <cuda_runtime.h>

namespace megatron::kernels::cuda {
class GemmContext;
}

namespace megatron::cuda {

class CachingAllocator;

// The calling thread's current stream.
cudaStream_t current_stream();

// Makes `stream` the calling thread's current stream until destruction (guards nest).
class StreamGuard {
 public:
  explicit StreamGuard(cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  cudaStream_t previous_;
};

// The process-wide cuBLASLt context of the current device, created on first use over
// device_allocator() and never destroyed (like device_allocator).
kernels::cuda::GemmContext& gemm_context();

}  // namespace megatron::cuda
