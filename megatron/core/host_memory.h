#pragma once
// Host memory for CPU tensors. Large blocks (>= 1 MiB) are kept for reuse after they are freed:
// the allocator would otherwise return them to the OS (glibc maps every block over 32 MiB
// separately), and each new use would page-fault through freshly zeroed pages - for the
// per-micro-batch activations of a CPU training step that cost more than some of the kernels.
// Sizes are rounded up to size classes 1/8 of a power of two apart (at most 12.5% slack); the
// cache holds at most as many bytes as the live high-water mark, so a process never keeps more
// than twice its peak.
#include <cstddef>

namespace megatron {

void* host_allocate(size_t bytes);            // 64-byte aligned; null when out of memory
void host_deallocate(void* p, size_t bytes);  // bytes: as given to host_allocate

}  // namespace megatron
