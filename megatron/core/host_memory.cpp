#include "megatron/core/host_memory.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace megatron {
namespace {

constexpr size_t kCachedFrom = size_t{1} << 20;

size_t size_class(size_t bytes) {
  if (bytes < kCachedFrom) return (bytes + 63) / 64 * 64;
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));
  const size_t step = top / 8;
  return (bytes + step - 1) / step * step;
}

class HostBlockCache {
 public:
  void* allocate(size_t bytes) {
    const size_t cls = size_class(bytes);
    if (cls >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
        live_ += cls;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, cls);
    if (p == nullptr && cls >= kCachedFrom) {  // the held blocks may be what is missing
      release();
      p = std::aligned_alloc(64, cls);
    }
    if (p != nullptr && cls >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ += cls;
      if (live_ > live_peak_) live_peak_ = live_;
    }
    return p;
  }

  void deallocate(void* p, size_t bytes) {
    if (p == nullptr) return;
    const size_t cls = size_class(bytes);
    if (cls >= kCachedFrom) {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ -= cls;
      if (cached_ + cls <= live_peak_) {
        free_[cls].push_back(p);
        cached_ += cls;
        return;
      }
    }
    std::free(p);
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0, live_ = 0, live_peak_ = 0;  // bytes of large blocks
};

// Process-wide like malloc's own arenas: one cache serves every tensor of the process.
HostBlockCache& cache() {
  static HostBlockCache* instance = new HostBlockCache;  // never destroyed: tensors may outlive
  return *instance;                                      // static destructors
}

}  // namespace

void* host_allocate(size_t bytes) { return cache().allocate(bytes); }
void host_deallocate(void* p, size_t bytes) { cache().deallocate(p, bytes); }

}  // namespace megatron
