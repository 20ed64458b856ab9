#include "megatron/backend/cuda/allocator.h"

#include <algorithm>
#include <array>
#include <memory>

#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/device.h"

namespace megatron::cuda {
namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = 4096;                // multiples of 512 below this
constexpr size_t kQuarterLimit = size_t(64) << 20;  // quarter-power-of-two classes below this
constexpr size_t kLargeRound = size_t(2) << 20;

size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

// Makes `device` current for the lifetime of the guard.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    MT_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MT_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

std::string mib(size_t bytes) { return concat(double(bytes) / double(1 << 20), " MiB"); }

}  // namespace

size_t CachingAllocator::size_class(size_t bytes) {
  if (bytes <= kSmallLimit) return round_up(std::max(bytes, size_t(1)), kMinBlock);
  if (bytes > kQuarterLimit) return round_up(bytes, kLargeRound);
  size_t pow2 = kSmallLimit;  // largest power of two below bytes
  while (pow2 * 2 < bytes) pow2 *= 2;
  const size_t quarter = pow2 / 4;
  return round_up(bytes, quarter);  // one of pow2 * {5/4, 6/4, 7/4, 8/4}
}

CachingAllocator::CachingAllocator(int device) {
  if (device < 0) MT_CUDA_CHECK(cudaGetDevice(&device));
  device_ = device;
}

CachingAllocator::~CachingAllocator() {
  try {
    DeviceGuard guard(device_);
    cudaDeviceSynchronize();
    std::lock_guard<std::mutex> lock(mutex_);
    process_pending_locked();
    release_cached_locked();
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  } catch (...) {
    // The CUDA runtime may already be gone at process exit; nothing useful to report.
  }
}

cudaEvent_t CachingAllocator::get_event_locked() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  MT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void CachingAllocator::process_pending_locked() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    while (!p.events.empty()) {
      const cudaError_t status = cudaEventQuery(p.events.back());
      if (status == cudaErrorNotReady) break;
      MT_CUDA_CHECK(status);
      spare_events_.push_back(p.events.back());
      p.events.pop_back();
    }
    if (p.events.empty()) {
      free_lists_[Key{p.stream, p.size}].push_back(p.ptr);
      pending_[i] = std::move(pending_.back());
      pending_.pop_back();
    } else {
      ++i;
    }
  }
}

void* CachingAllocator::device_malloc_locked(size_t size) {
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it and retry with the cache released
    ++stats_.oom_retries;
    MT_CUDA_CHECK(cudaDeviceSynchronize());
    process_pending_locked();
    release_cached_locked();
    status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      MT_CHECK(false, "CUDA out of memory on device ", device_, ": requested ", mib(size),
               "; allocator holds ", mib(stats_.current_bytes), " in use, ",
               mib(stats_.reserved_bytes), " reserved, peak ", mib(stats_.peak_bytes),
               "; device has ", mib(free_b), " free of ", mib(total_b));
    }
  }
  MT_CUDA_CHECK(status);
  ++stats_.device_allocs;
  stats_.reserved_bytes += size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return ptr;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [key, ptrs] : free_lists_) {
    for (void* p : ptrs) {
      cudaFree(p);
      ++stats_.device_frees;
      stats_.reserved_bytes -= key.second;
      stats_.cached_bytes -= key.second;
    }
  }
  free_lists_.clear();
}

void* CachingAllocator::allocate(size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return nullptr;
  const size_t size = size_class(bytes);
  DeviceGuard guard(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty()) process_pending_locked();
  void* ptr = nullptr;
  auto it = free_lists_.find(Key{stream, size});
  if (it != free_lists_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.cached_bytes -= size;
    ++stats_.cache_hits;
  } else {
    ptr = device_malloc_locked(size);
  }
  live_.emplace(ptr, Block{size, stream, {}});
  stats_.current_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), "CachingAllocator::free: pointer ", ptr,
           " was not allocated by this allocator (device ", device_, ") or was freed twice");
  Block block = std::move(it->second);
  live_.erase(it);
  stats_.current_bytes -= block.size;
  stats_.cached_bytes += block.size;
  if (block.other_streams.empty()) {
    free_lists_[Key{block.stream, block.size}].push_back(ptr);
    return;
  }
  DeviceGuard guard(device_);
  Pending pending{ptr, block.size, block.stream, {}};
  for (cudaStream_t s : block.other_streams) {
    cudaEvent_t e = get_event_locked();
    MT_CUDA_CHECK(cudaEventRecord(e, s));
    pending.events.push_back(e);
  }
  pending_.push_back(std::move(pending));
}

void CachingAllocator::record_stream(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  MT_CHECK(it != live_.end(), "CachingAllocator::record_stream: unknown pointer ", ptr);
  Block& b = it->second;
  if (stream == b.stream) return;
  if (std::find(b.other_streams.begin(), b.other_streams.end(), stream) == b.other_streams.end())
    b.other_streams.push_back(stream);
}

void CachingAllocator::empty_cache() {
  DeviceGuard guard(device_);
  MT_CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(mutex_);
  process_pending_locked();
  release_cached_locked();
}

size_t CachingAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.current_bytes;
}

size_t CachingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.peak_bytes;
}

size_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_.reserved_bytes;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

CachingAllocator& device_allocator(int device) {
  if (device < 0) device = current_device();
  constexpr int kMaxDevices = 64;
  MT_CHECK(device < kMaxDevices, "device_allocator: device ", device, " beyond ", kMaxDevices);
  static std::mutex mutex;
  static std::array<CachingAllocator*, kMaxDevices> allocators{};
  std::lock_guard<std::mutex> lock(mutex);
  if (allocators[device] == nullptr) allocators[device] = new CachingAllocator(device);  // kept
  return *allocators[device];
}

}  // namespace megatron::cuda
