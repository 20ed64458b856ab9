#pragma once
// The keys and values of every position decoded so far, per layer, for incremental decoding
// (MicroBatchInfo::kv_cache): a forward with a cache runs only the new positions, each
// attention layer appending its keys/values here and attending over all cached positions. The
// caller advances `length` by the number of new positions after each forward.
#include <cstdint>
#include <vector>

#include "megatron/core/tensor.h"

namespace megatron {

struct KvCache {
  KvCache(int64_t num_layers, int64_t capacity_)
      : capacity(capacity_),
        keys(static_cast<size_t>(num_layers)),
        values(static_cast<size_t>(num_layers)) {}
  int64_t length = 0;    // cached positions: the next forward's first position
  int64_t capacity = 0;  // the most positions it holds
  // Per layer [B, G_local, capacity, Dh] in the activations' dtype on the layer's device,
  // allocated by the layer on first use.
  std::vector<Tensor> keys, values;
};

}  // namespace megatron
