#include "megatron/backend/cuda/event_clock.h"

#include <cuda_runtime.h>

#include <vector>

#include "megatron/backend/cuda/check.h"
#include "megatron/backend/cuda/runtime.h"

namespace megatron::cuda {
namespace {

class EventClock final : public OpClock {
 public:
  ~EventClock() override {
    for (cudaEvent_t e : pool_) (void)cudaEventDestroy(e);
  }

  void mark() override {
    if (used_ == pool_.size()) {
      cudaEvent_t e = nullptr;
      MT_CUDA_CHECK(cudaEventCreate(&e));
      pool_.push_back(e);
    }
    MT_CUDA_CHECK(cudaEventRecord(pool_[used_++], current_stream()));
  }

  std::vector<double> resolve() override {
    std::vector<double> out;
    if (used_ == 0) return out;
    MT_CUDA_CHECK(cudaEventSynchronize(pool_[used_ - 1]));
    out.reserve(used_);
    for (size_t i = 0; i < used_; ++i) {
      float ms = 0.0f;
      MT_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[0], pool_[i]));
      out.push_back(static_cast<double>(ms) * 1e-3);
    }
    used_ = 0;
    return out;
  }

 private:
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
};

}  // namespace

std::unique_ptr<OpClock> make_event_clock() { return std::make_unique<EventClock>(); }

}  // namespace megatron::cuda
