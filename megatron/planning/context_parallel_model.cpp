#include "megatron/planning/context_parallel_model.h"

#include <algorithm>

namespace megatron::planning::detail {

ContextParallelCost context_parallel_cost(const Dims& d, int64_t cp, config::CpCommType comm,
                                          double s, double b, double t, double e,
                                          double attention_fwd_s, double bw) {
  ContextParallelCost c;
  if (cp <= 1) return c;
  const double n = static_cast<double>(cp);
  const double H = static_cast<double>(d.H), G = static_cast<double>(d.G),
               Dh = static_cast<double>(d.Dh);
  const double block = s * b * 2 * G * Dh * e / t;       // one rank's keys and values
  const double grad_block = s * b * 2 * G * Dh * 4 / t;  // their fp32 gradients
  switch (comm) {
    case config::CpCommType::P2P: {
      // Each hop hides behind one block's attention (forward) or its backward (2x).
      const double hop = block / bw, per_block = attention_fwd_s / n;
      c.bytes = (n - 1) * 2 * block + n * grad_block;
      c.exposed_s =
          (n - 1) * (std::max(0.0, hop - per_block) + std::max(0.0, hop - 2 * per_block)) +
          n * grad_block / bw;
      break;
    }
    case config::CpCommType::AllGather:
      c.kept_bytes = n * block;
      c.bytes = (n - 1) * (block + grad_block);
      c.exposed_s = c.bytes / bw;
      break;
    case config::CpCommType::A2A: {
      const double qkv = s * b * (H + 2 * G) * Dh * e / t, out = s * b * H * Dh * e / t;
      c.kept_bytes = qkv + out + 4 * b * H / t * s;
      c.bytes = 2 * (n - 1) / n * (qkv + out);
      c.exposed_s = c.bytes / bw;
      break;
    }
  }
  return c;
}

}  // namespace megatron::planning::detail
