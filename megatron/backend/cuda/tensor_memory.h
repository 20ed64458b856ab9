#pragma once
// The CUDA backend's implementation of DeviceMemoryBackend (megatron/core/device_memory.h), the
// memory behind Tensor::empty(shape, dtype, Device::CUDA):
//  - allocation: device_allocator() of the current device (the stream-ordered caching
//    allocator, allocator.h) on the current stream (runtime.h); a tensor's block goes back to
//    that stream's free list when its storage dies;
//  - copies: cudaMemcpyAsync on the current stream; a copy from or to host memory then
//    synchronises that stream, so host buffers are ready when Tensor::copy_from returns;
//  - zero: cudaMemsetAsync on the current stream;
//  - memory_stats: the current device's allocator (bytes handed out, peak).
// CUDA-free header: the registration object (registration/register_tensor_memory.cpp) includes
// it from a plain C++ translation unit.
#include "megatron/core/device_memory.h"

namespace megatron::cuda {

// The process-wide instance (stateless apart from the allocators it uses; never destroyed).
DeviceMemoryBackend& tensor_memory();

// Installs tensor_memory() for Device::CUDA (what the registration object does at start-up).
// Idempotent; returns the backend that was installed before.
DeviceMemoryBackend* register_tensor_memory();

}  // namespace megatron::cuda
