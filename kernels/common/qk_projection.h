#pragma once
// The shape of a q/k RMSNorm over whole projections (OLMo-2's q_norm / k_norm: one statistic
// per token over all query heads, one over all key heads, not per head) applied inside the
// fused QKV activation [tokens, groups, q_slots + 2, head_dim] (the value slot passes through).
// Under tensor parallelism a rank holds `groups` of the query groups, so its sums are partial:
// the statistics take the tensor-parallel sum of qk_projection_sums before the norm proper.
#include <cstdint>

#include "kernels/common/host_device.h"

namespace megatron::kernels {

struct QkProjection {
  int64_t tokens = 0;   // S x B
  int64_t groups = 0;   // query groups on this rank
  int64_t q_slots = 0;  // query heads per group
  int64_t head_dim = 0;
  // The whole projections' widths (every rank's heads): heads x head_dim, groups x head_dim.
  int64_t q_width = 0, k_width = 0;
  float eps = 1e-6f;
  MT_HD int64_t row() const { return groups * (q_slots + 2) * head_dim; }
  MT_HD int64_t local_q() const { return groups * q_slots * head_dim; }  // this rank's q weights
  MT_HD int64_t local_k() const { return groups * head_dim; }            // and k weights
};

}  // namespace megatron::kernels
