#include "megatron/optimizer/offload.h"

#include <algorithm>
#include <future>

#include "kernels/cpu/host_adam.h"
#include "megatron/backend/ops.h"

namespace megatron::optim {
namespace {

// Elements per pipeline chunk: 4 MiB of fp32 gradients, long enough to amortise a copy's
// start-up and short enough that the first copy and the last step are a small part.
constexpr int64_t kChunkElements = int64_t{1} << 20;

}  // namespace

HostOffload::HostOffload(ParamStore& store, std::vector<ParamSegment> segments)
    : store_(&store), segments_(std::move(segments)) {
  int64_t state = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    const ParamSegment& s = segments_[i];
    MT_CHECK(s.offloaded && s.master.device() == Device::CPU, "segment of '", s.param->name,
             "' is not offloaded");
    state = std::max(state, s.state_offset + s.size());
    for (int64_t b = 0; b < s.size(); b += kChunkElements)
      chunks_.push_back({i, b, std::min(kChunkElements, s.size() - b)});
  }
  const Device device = store.device();
  m_memory_ = PinnedHostBuffer(static_cast<size_t>(state) * sizeof(float), device);
  v_memory_ = PinnedHostBuffer(static_cast<size_t>(state) * sizeof(float), device);
  m_ = Tensor::wrap(m_memory_.data(), {state}, DType::F32);
  v_ = Tensor::wrap(v_memory_.data(), {state}, DType::F32);
  int64_t widest = 0;
  for (const Chunk& c : chunks_) widest = std::max(widest, c.size);
  const DType model = store.model_dtype();
  grad_memory_ = PinnedHostBuffer(static_cast<size_t>(2 * widest) * sizeof(float), device);
  weight_memory_ = PinnedHostBuffer(static_cast<size_t>(2 * widest) * dtype_size(model), device);
  for (int k = 0; k < 2; ++k) {
    grad_stage_[k] =
        Tensor::wrap(static_cast<float*>(grad_memory_.data()) + k * widest, {widest}, DType::F32);
    weight_stage_[k] = Tensor::wrap(static_cast<char*>(weight_memory_.data()) +
                                        static_cast<size_t>(k * widest) * dtype_size(model),
                                    {widest}, model);
  }
}

void HostOffload::step(const math::AdamWParams& p) {
  const float weight_decay = p.weight_decay;
  // Chunk c on the host: step its masters from the staged gradients, round them into the staged
  // weights (16-bit model dtype; fp32 weights are the masters themselves).
  auto host_step = [&](size_t c) {
    const Chunk& ch = chunks_[c];
    const ParamSegment& s = segments_[ch.segment];
    math::AdamWParams hp = p;
    hp.weight_decay = s.param->weight_decay ? weight_decay : 0.0f;
    const int64_t at = s.state_offset + ch.begin;
    Tensor master = s.master.flat_view(ch.begin, {ch.size});
    kernels::cpu::host_adamw_step(master.data<float>(), grad_stage_[c % 2].data<float>(),
                                  m_.data<float>() + at, v_.data<float>() + at, ch.size, hp);
    if (store_->mixed_precision()) {
      Tensor rounded = weight_stage_[c % 2].flat_view(0, {ch.size});
      ops::cast(master, rounded);
    }
  };
  auto weights_back = [&](size_t c) {
    const Chunk& ch = chunks_[c];
    const ParamSegment& s = segments_[ch.segment];
    Tensor dst = s.weight.flat_view(ch.begin, {ch.size});
    if (store_->mixed_precision())
      dst.copy_from(weight_stage_[c % 2].flat_view(0, {ch.size}));
    else
      dst.copy_from(s.master.flat_view(ch.begin, {ch.size}));
  };
  std::future<void> running;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& ch = chunks_[c];
    // Device-to-host copy of this chunk's gradients while the previous chunk is stepped.
    grad_stage_[c % 2]
        .flat_view(0, {ch.size})
        .copy_from(segments_[ch.segment].grad.flat_view(ch.begin, {ch.size}));
    if (running.valid()) {
      running.get();
      weights_back(c - 1);
    }
    running = std::async(std::launch::async, host_step, c);
  }
  if (running.valid()) {
    running.get();
    weights_back(chunks_.size() - 1);
  }
}

}  // namespace megatron::optim
