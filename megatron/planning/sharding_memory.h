#pragma once
// The planner's model of data-parallel sharding (internal to megatron/planning): what one rank
// keeps of ParamStore's buffers under each strategy (megatron/params/sharding.h), the transient
// buffers of the per-unit gathers and reductions (megatron/distributed/fully_sharded.h), optimizer
// offload, and the data-parallel traffic and its exposed time. planner.h documents the formulas.
#include <cstdint>
#include <vector>

#include "megatron/config/options.h"
#include "megatron/planning/planner.h"

namespace megatron::planning::detail {

// Ring collectives over n ranks: seconds to move `bytes` (the whole buffer) at bw bytes/s.
inline double ring_all_reduce(double bytes, int64_t n, double bw) {
  return n > 1 ? 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes / bw : 0.0;
}
inline double ring_gather(double bytes, int64_t n, double bw) {  // all-gather or reduce-scatter
  return n > 1 ? static_cast<double>(n - 1) / static_cast<double>(n) * bytes / bw : 0.0;
}

// One parameter unit of a stage (ParamStore::begin_unit: a layer, an embedding table, the head),
// in elements by buffer region (BufferRegion): dense trainable, routed experts', frozen (LoRA).
struct UnitParams {
  int64_t dense = 0, expert = 0, frozen = 0;
};

struct ShardingInputs {
  config::ShardingStrategy strategy = config::ShardingStrategy::NoShard;
  int64_t dp = 1, instances = 1;  // instances > 1: hybrid sharding (shard group dp / instances)
  int64_t expert_dp = 1;          // routed experts' shard group (dp / ep)
  int64_t microbatches = 1;
  double wbytes = 4;        // model dtype
  double moment_bytes = 8;  // Adam 8, SGD 4 per trainable element
  bool mixed = false;       // fp32 masters apart from the model weights
  double offload = 0;       // fraction of masters + moments in host memory (optimizer.offload)
  // parallel.grad_compression topk (no_shard): the share of gradient entries each rank sends,
  // as (int32 index, fp32 value) pairs all-gathered instead of the all-reduce; 0: none.
  double topk_ratio = 0;
  // optimizer.type onebit_adam (no_shard), after its freeze: each rank's momenta leave as signs
  // and a scale per 256 elements, all-to-all to their servers and all-gathered back at the step
  // (not overlapped with backward); the warm-up's all-reduces are not modelled.
  bool onebit_adam = false;
  // ZeRO++: unit weight gathers (optim_grads_params) / gradient reduce-scatters (optim_grads*)
  // as int8 blocks (parallel.zero_quantized_weights / zero_quantized_gradients).
  bool quantized_weights = false, quantized_grads = false;
  // A pipeline schedule with W passes (zb_h1, zb_v, dualpipe_v): sharded gradients stay whole
  // until the step's end and are reduce-scattered once then (distributed/fully_sharded.h).
  bool deferred_weight_grads = false;
  std::vector<UnitParams> units;
  int64_t shard_group() const;  // dp / instances (dense and frozen regions)
};

// Bytes per rank.
struct ShardedState {
  double weights = 0, gradients = 0, master = 0, optimizer = 0;  // on the device
  double grad_scratch = 0;    // optim: the fp32 reduce-scatter outputs (persistent)
  double transient = 0;       // ZeRO-2/3: gathered units and in-flight gradient pieces
  double host_offloaded = 0;  // masters + moments moved to host memory
  double stepped = 0;         // elements the optimizer updates (its owned share)
  double device() const {
    return weights + gradients + master + optimizer + grad_scratch + transient;
  }
};
ShardedState sharded_state(const ShardingInputs& in);
// Sets m's weights, master, gradients, optimizer, grad_scratch, host_offloaded,
// sharding_transient and optimizer_with(out)_distributed from `in`; returns the state.
ShardedState fill_state(const ShardingInputs& in, MemoryBreakdown& m);
// m.total and m.total_by_strategy, with `rest` the bytes no strategy changes.
void fill_totals(const ShardingInputs& in, double rest, MemoryBreakdown& m);

// Data-parallel communication of one step on one rank.
struct DataParallelComm {
  double bytes = 0;           // payload handed to collectives over groups of more than one rank
  double grads_exposed = 0;   // gradient reductions not hidden behind backward (seconds)
  double gather_exposed = 0;  // weight all-gathers not hidden (seconds)
};
struct DataParallelLinks {
  double shard = 0, replicas = 0, experts = 0;  // bytes/s of each group's ring
};
// compute_mb: one micro-batch's forward + backward time on this rank.
DataParallelComm data_parallel_comm(const ShardingInputs& in, const DataParallelLinks& links,
                                    double compute_mb);

// Seconds of the optimizer step: the device's share at device memory bandwidth (bytes/s), the
// offloaded share over PCIe and at host memory bandwidth.
double optimizer_step_seconds(const ShardingInputs& in, const ShardedState& state,
                              double device_bandwidth);

}  // namespace megatron::planning::detail
