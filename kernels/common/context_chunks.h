#pragma once
// Which positions of the global sequence a context-parallel rank holds. The sequence of `total`
// positions is cut into 2 * cp chunks; rank r holds chunk r, then chunk 2cp - 1 - r (Megatron's
// load balancing: under a causal mask every rank then does the same attention work). Its local
// row t < chunk is global position first * chunk + t, and row chunk + t is second * chunk + t.
// Without context parallelism (chunk 0) local rows are global positions.
#include <cstdint>

#include "kernels/common/host_device.h"

namespace megatron::kernels {

struct ContextChunks {
  int64_t chunk = 0;  // rows per chunk; 0: no context parallelism
  int64_t first = 0, second = 0;
  int64_t total = 0;  // the global sequence

  static ContextChunks of(int64_t total, int64_t cp, int64_t rank) {
    if (cp <= 1) return ContextChunks{};
    return ContextChunks{total / (2 * cp), rank, 2 * cp - 1 - rank, total};
  }
  MT_HD bool active() const { return chunk > 0; }
  // The global position of local row t.
  MT_HD int64_t global(int64_t t) const {
    if (chunk == 0) return t;
    return t < chunk ? first * chunk + t : second * chunk + (t - chunk);
  }
};

}  // namespace megatron::kernels
