#pragma once
// Where the elements of an [S, B, D] activation (a micro-batch, or a sequence slice of one)
// draw their dropout randomness: element (s, b, d) uses Philox index
//   ((batch_offset + b) * seq_total + chunks.global(seq_offset + s)) * D_total + d_offset + d,
// its position in the global [seq_total, global batch, D_total] tensor laid out batch-major (a
// tensor holding features [d_offset, d_offset + D) of D_total: a tensor-parallel shard). So the
// masks depend neither on the micro-batch size nor on data-, sequence-, context- or
// tensor-parallel splits (under context parallelism seq_offset counts the rank's own rows and
// `chunks` maps them to global positions).
#include <cstdint>

#include "kernels/common/context_chunks.h"
#include "kernels/common/host_device.h"

namespace megatron::kernels {

struct DropoutRows {
  int64_t S = 0, B = 0, D = 0;  // the local tensor
  int64_t batch_offset = 0;     // global sample index of local sample 0
  int64_t seq_offset = 0;       // position of local row 0 (among the context-parallel rows)
  int64_t seq_total = 0;        // the full sequence length
  int64_t d_offset = 0;         // global feature index of local feature 0
  int64_t d_total = 0;          // all features (0: D)
  ContextChunks chunks = {};    // context parallelism: the rank's rows -> global positions

  MT_HD int64_t rows() const { return S * B; }
  // Philox index of element 0 of local row r = s * B + b.
  MT_HD uint64_t row_index(int64_t r) const {
    const int64_t s = r / B, b = r % B;
    const int64_t width = d_total > 0 ? d_total : D;
    return static_cast<uint64_t>(((batch_offset + b) * seq_total + chunks.global(seq_offset + s)) *
                                     width +
                                 d_offset);
  }
};

}  // namespace megatron::kernels
