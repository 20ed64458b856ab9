#pragma once
// Stream-ordered caching allocator for device memory: after warm-up a training step makes no
// cudaMalloc/cudaFree calls.
//
// - Requests are rounded to a size class: multiples of 512 B up to 4 KiB, then four classes per
//   power of two (waste <= 25%) up to 64 MiB, then multiples of 2 MiB. A block is never split;
//   freed blocks wait on a free list keyed by (stream, size class) for the next request of the
//   same class on the same stream.
// - Stream order is the safety rule (as in PyTorch's allocator): a block freed on stream S may be
//   handed out again at once to a later allocation on S, because every earlier use of it on S
//   runs first. Blocks also used on other streams must be declared with record_stream(): their
//   free then records an event on each such stream and the block is reused only once those
//   events have completed.
// - When cudaMalloc runs out of memory the allocator synchronises the device, releases every
//   cached block and tries once more before throwing an error that reports the request and the
//   allocator's statistics.
// Thread-safe (one mutex). Works on the device that was current at construction.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace megatron::cuda {

struct AllocatorStats {
  size_t current_bytes = 0;   // handed out to callers (size-class rounded)
  size_t peak_bytes = 0;      // high-water mark of current_bytes (since reset_peak)
  size_t reserved_bytes = 0;  // held from cudaMalloc: live plus cached
  size_t peak_reserved_bytes = 0;
  size_t cached_bytes = 0;    // reserved but free (free lists and blocks awaiting events)
  int64_t device_allocs = 0;  // cudaMalloc calls so far
  int64_t device_frees = 0;   // cudaFree calls so far
  int64_t cache_hits = 0;     // allocations served from a free list
  int64_t oom_retries = 0;    // cache flushes forced by cudaMalloc running out of memory
};

class CachingAllocator {
 public:
  // device < 0: the current device.
  explicit CachingAllocator(int device = -1);
  // Frees the cached blocks; blocks still handed out are left to the driver (a leak report
  // would come too late to act on).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` bytes, 256-byte aligned, for use on `stream`. bytes == 0 gives nullptr.
  void* allocate(size_t bytes, cudaStream_t stream);
  // Returns a block from allocate(); nullptr is ignored, any other unknown pointer throws.
  void free(void* ptr);
  // Declares that `ptr` is (also) used by work on `stream`, which is not the stream it was
  // allocated on; its reuse then waits for the work queued on `stream` before its free().
  void record_stream(void* ptr, cudaStream_t stream);
  // Releases every cached block to the driver (synchronises the device first).
  void empty_cache();

  size_t current_bytes() const;
  size_t peak_bytes() const;
  size_t reserved_bytes() const;
  AllocatorStats stats() const;
  void reset_peak();
  int device() const { return device_; }

  static size_t size_class(size_t bytes);

 private:
  struct Block {
    size_t size;
    cudaStream_t stream;
    std::vector<cudaStream_t> other_streams;
  };
  struct Pending {
    void* ptr;
    size_t size;
    cudaStream_t stream;
    std::vector<cudaEvent_t> events;
  };
  using Key = std::pair<cudaStream_t, size_t>;

  void* device_malloc_locked(size_t size);
  void release_cached_locked();  // caller synchronised the device
  void process_pending_locked();
  cudaEvent_t get_event_locked();

  int device_ = 0;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> live_;
  std::map<Key, std::vector<void*>> free_lists_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  AllocatorStats stats_;
};

// The process-wide allocator of `device` (< 0: the current device), created on first use and
// kept until the process exits (never destroyed: CUDA may be torn down before static
// destructors run).
CachingAllocator& device_allocator(int device = -1);

// A block from an allocator, returned on destruction (stream-ordered, see above). Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(CachingAllocator& allocator, size_t bytes, cudaStream_t stream)
      : allocator_(&allocator), ptr_(allocator.allocate(bytes, stream)), bytes_(bytes) {}
  ~DeviceMemory() { reset(); }
  DeviceMemory(DeviceMemory&& o) noexcept
      : allocator_(o.allocator_), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(o.bytes_) {}
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    if (this != &o) {
      reset();
      allocator_ = o.allocator_;
      ptr_ = std::exchange(o.ptr_, nullptr);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  void reset() {
    if (ptr_ != nullptr) allocator_->free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

 private:
  CachingAllocator* allocator_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace megatron::cuda
