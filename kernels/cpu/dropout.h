#pragma once
// Inverted dropout with a Philox mask: element i (global index index_offset + i) is kept when
// uniform(seed, stream, index_offset + i) >= p, and scaled by 1/(1-p). The mask is never stored:
// backward regenerates it, so any shard of a tensor reproduces the full tensor's mask.
#include <cstdint>

#include "kernels/common/dropout_rows.h"

namespace megatron::kernels::cpu {

void dropout_forward(const float* x, float* y, int64_t n, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset);
void dropout_backward(const float* dy, float* dx, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t index_offset);

// The same over the rows of an [S, B, D] tensor: row r = s * B + b starts at Philox index
// rows.row_index(r) (kernels/common/dropout_rows.h). Backward is the same map.
void dropout_rows(const float* in, float* out, const DropoutRows& rows, float p, uint64_t seed,
                  uint64_t stream);

}  // namespace megatron::kernels::cpu
