#include "models/model.h"

namespace megatron::models {

int64_t count_lm_targets(const MicroBatch& mb) {
  const int32_t* labels = mb.labels.data<int32_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < mb.labels.numel(); ++i) n += labels[i] != kIgnoreIndex;
  return n;
}

}  // namespace megatron::models
