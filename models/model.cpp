#include "models/model.h"

#include <algorithm>

#include "megatron/backend/ops.h"

namespace megatron::models {

MicroBatchInfo MicroBatch::layer_info() const {
  MicroBatchInfo out = info;
  out.position_ids = present(position_ids) ? &position_ids : nullptr;
  out.segment_ids = present(segment_ids) ? &segment_ids : nullptr;
  return out;
}

int64_t count_lm_targets(const MicroBatch& mb) {
  const Tensor host = mb.labels.to(Device::CPU);
  const int32_t* labels = host.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < mb.labels.numel(); ++i) n += labels[i] != kIgnoreIndex;
  return n;
}

ModelStage ModelStage::resolved(int64_t total_layers) const {
  ModelStage s = *this;
  if (s.num_layers < 0) s.num_layers = total_layers - s.first_layer;
  MT_CHECK(s.first_layer >= 0 && s.num_layers >= 0 && s.first_layer + s.num_layers <= total_layers,
           "stage layers [", s.first_layer, ", +", s.num_layers, ") outside a ", total_layers,
           "-layer model");
  return s;
}

void fill_positions(Tensor& pos, int64_t first) {
  const bool on_host = pos.device() == Device::CPU;
  Tensor host = on_host ? pos : Tensor::empty(pos.shape(), DType::I32);
  const int64_t S = pos.dim(0), B = pos.numel() / std::max<int64_t>(S, 1);
  int32_t* p = host.data<int32_t>();
  for (int64_t s = 0; s < S; ++s)
    for (int64_t b = 0; b < B; ++b) p[s * B + b] = static_cast<int32_t>(first + s);
  if (!on_host) pos.copy_from(host);
}

const Tensor& PositionIds::get(int64_t S, int64_t B, int64_t first_position, Device device) {
  const bool same = ids.owns_storage() && ids.shape() == Shape({S, B}) && ids.device() == device &&
                    first == first_position;
  if (!same) {
    ensure(ids, {S, B}, DType::I32, device);
    fill_positions(ids, first_position);
    first = first_position;
  }
  return ids;
}

void fill_value(Tensor& t, float v) { ops::fill(t, v); }

double sum_target_losses(const Tensor& losses, const Tensor& labels) {
  const Tensor l = losses.to(Device::CPU), y = labels.to(Device::CPU);
  const float* lp = l.data<float>();
  const int32_t* yp = y.data<int32_t>();
  double total = 0.0;
  for (int64_t i = 0; i < y.numel(); ++i)
    if (yp[i] != kIgnoreIndex) total += lp[i];
  return total;
}

double sum_values(const Tensor& t) {
  const Tensor h = t.to(Device::CPU);
  const float* p = h.data<float>();
  double total = 0.0;
  for (int64_t i = 0; i < h.numel(); ++i) total += p[i];
  return total;
}

}  // namespace megatron::models
