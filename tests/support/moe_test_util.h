#pragma once
// MoE test helpers: the routing of an input as the router computes it, from a naive
// double-precision x W^T (the expected values of the router-loss tests).
#include <cstdint>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/transformer/moe/router.h"

namespace megatron::moe::testing {

// x [.., D] fp32 (T = numel / D tokens), router_weight [E, D] fp32.
inline Routing naive_routing(const Tensor& x, const Tensor& router_weight,
                             const RouterOptions& opt) {
  const int64_t E = router_weight.dim(0), D = router_weight.dim(1), T = x.numel() / D;
  const float* xs = x.data<float>();
  const float* w = router_weight.data<float>();
  std::vector<float> logits(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(xs[t * D + d]) * w[e * D + d];
      logits[static_cast<size_t>(t * E + e)] = static_cast<float>(dot);
    }
  return route(logits.data(), T, opt, nullptr);
}

}  // namespace megatron::moe::testing
