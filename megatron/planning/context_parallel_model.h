#pragma once
// The planner's model of context parallelism (internal to megatron/planning), as
// megatron/transformer/context_parallel.h runs it: per layer and micro-batch, what a cp rank
// keeps beyond the local attention (all_gather: every rank's key/value block; a2a: its heads'
// whole-sequence qkv, output and lse) and the communication each cp_comm_type adds, with what of
// it hides behind the attention compute.
//
// With s = S / cp rows per rank, b micro-batch, t tensor parallel, e bytes moved per element (4
// on the CPU, which moves fp32; the activation bytes on cuda) and one key/value block
// B = s b 2 G d e / t:
//   p2p         forward cp - 1 block hops, each overlapped with one block pair's attention;
//               backward the same hops overlapped with the (2x longer) block backward, plus cp
//               hops of the fp32 key/value gradients that are not overlapped.
//   all_gather  one all-gather of cp blocks forward, one reduce-scatter of their fp32
//               gradients backward, neither overlapped; keeps the gathered cp B per layer.
//   a2a         four all-to-alls (qkv and output forward, their gradients backward) of
//               (cp - 1) / cp of s b (H + 2G) d e / t and s b H d e / t, not overlapped; keeps
//               the whole-sequence qkv, output and lse of H / cp heads (about the local qkv
//               and output again).
#include "megatron/config/options.h"
#include "megatron/planning/model_dims.h"

namespace megatron::planning::detail {

struct ContextParallelCost {
  double kept_bytes = 0;  // per layer and micro-batch
  double bytes = 0;       // moved per layer and micro-batch (forward + backward)
  double exposed_s = 0;   // seconds per layer and micro-batch not hidden by compute
};

// s: rows per cp rank; attention_fwd_s: this rank's forward attention core time per layer and
// micro-batch; bw: bytes/s of the cp group.
ContextParallelCost context_parallel_cost(const Dims& d, int64_t cp, config::CpCommType comm,
                                          double s, double b, double t, double bytes,
                                          double attention_fwd_s, double bw);

}  // namespace megatron::planning::detail
