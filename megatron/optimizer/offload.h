#pragma once
// The offloaded part of the optimizer (optimizer.offload: cpu): segments whose fp32 masters live
// in host memory (ParamStore::host_masters) keep their Adam moments there too and are stepped by
// the vectorised host AdamW (kernels/cpu/host_adam.h). One step walks their elements in chunks
// as a pipeline: the gradients of chunk c+1 travel device-to-host while a worker thread steps
// chunk c and rounds its masters to the model dtype; chunk c's weights then travel back. The
// device never holds the offloaded masters or moments.
#include <cstdint>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/core/device_memory.h"
#include "megatron/params/parameter.h"

namespace megatron::optim {

class HostOffload {
 public:
  // segments: the offloaded ones (ParamSegment::offloaded), with state_offset into this
  // object's moments. store: their weights' and gradients' home.
  HostOffload(ParamStore& store, std::vector<ParamSegment> segments);
  // AdamW over the segments (p with weight decay; decay-free parameters get 0).
  void step(const math::AdamWParams& p);
  Tensor& exp_avg() { return m_; }
  Tensor& exp_avg_sq() { return v_; }
  int64_t numel() const { return m_.numel(); }

 private:
  struct Chunk {
    size_t segment;
    int64_t begin, size;  // within the segment
  };
  ParamStore* store_;
  std::vector<ParamSegment> segments_;
  std::vector<Chunk> chunks_;
  PinnedHostBuffer m_memory_, v_memory_, grad_memory_, weight_memory_;
  Tensor m_, v_;
  Tensor grad_stage_[2], weight_stage_[2];  // host, double-buffered
};

}  // namespace megatron::optim
