// The planner's data-parallel sharding model (sharding_memory.h): ParamStore's buffers per rank
// under each strategy, the per-unit transients, offload, traffic and exposed time.
#include "megatron/planning/sharding_memory.h"

#include <algorithm>
#include <functional>

namespace megatron::planning::detail {
namespace {

using config::ShardingStrategy;

// distributed/fully_sharded.cpp: gradient pieces reduce-scattered at once before the oldest is
// completed (planning cannot include distributed/: the value is repeated here).
constexpr size_t kMaxReducesInFlight = 4;
// ZeRO-3 units gathered at once: the one in use, the prefetched next, and the last layer kept
// from its forward for its backward.
constexpr size_t kGatheredUnits = 3;
// Optimizer offload: gradients to the host and weights back over PCIe (per device, one
// direction at a time), the host AdamW streaming its state at host memory bandwidth.
constexpr double kPcieBytesPerS = 25e9;
constexpr double kHostAdamBytesPerS = 50e9;
// Adam reads the gradient and reads and writes master, m and v (fp32): 28 bytes per element.
constexpr double kAdamBytes = 28;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The sum of the n largest values.
double sum_largest(std::vector<double> v, size_t n) {
  std::sort(v.begin(), v.end(), std::greater<>());
  double s = 0;
  for (size_t i = 0; i < v.size() && i < n; ++i) s += v[i];
  return s;
}

struct Totals {
  int64_t dense = 0, expert = 0, frozen = 0;
};
Totals totals(const ShardingInputs& in) {
  Totals t;
  for (const UnitParams& u : in.units) {
    t.dense += u.dense;
    t.expert += u.expert;
    t.frozen += u.frozen;
  }
  return t;
}

bool grads_sharded(ShardingStrategy s) {
  return s == ShardingStrategy::OptimGrads || s == ShardingStrategy::OptimGradsParams;
}

}  // namespace

int64_t ShardingInputs::shard_group() const {
  // Hybrid sharding needs a sharded optimizer: no_shard reduces over all of dp.
  if (strategy == ShardingStrategy::NoShard) return dp;
  return dp / std::max<int64_t>(instances, 1);
}

ShardedState sharded_state(const ShardingInputs& in) {
  const bool opt = in.strategy != ShardingStrategy::NoShard;
  const bool grads = grads_sharded(in.strategy);
  const bool weights = in.strategy == ShardingStrategy::OptimGradsParams;
  // The pieces' groups (param_layout.cpp): 1 without a sharded optimizer.
  const int64_t nd = opt ? in.shard_group() : 1, ne = opt ? std::max<int64_t>(in.expert_dp, 1) : 1;
  const Totals sum = totals(in);
  // This rank's owned elements of each region: per-unit pieces padded to their group (gradients
  // sharded), else one bucketed region padded to its group.
  int64_t own_d = cdiv(sum.dense, nd), own_e = cdiv(sum.expert, ne), own_f = sum.frozen;
  std::vector<double> grad_pieces, gathered;
  if (grads) {
    own_d = own_e = 0;
    if (weights) own_f = 0;
    for (const UnitParams& u : in.units) {
      const int64_t d = cdiv(u.dense, nd), e = cdiv(u.expert, ne), f = cdiv(u.frozen, nd);
      own_d += d;
      own_e += e;
      if (weights) own_f += f;
      // The unit's fp32 gradient (whole pieces) and the reduce-scatter output (its slice).
      grad_pieces.push_back(4.0 * static_cast<double>(nd * d + ne * e + d + e));
      gathered.push_back(in.wbytes * static_cast<double>(nd * d + ne * e + nd * f));
    }
  }
  const double owned = static_cast<double>(own_d + own_e);
  const double buffer = static_cast<double>(nd * own_d + ne * own_e);  // padded trainable region
  ShardedState s;
  s.weights = in.wbytes * (weights ? owned + static_cast<double>(own_f)
                                   : buffer + static_cast<double>(sum.frozen));
  s.gradients = 4 * (grads ? owned : buffer);
  s.master = in.mixed ? 4 * (opt ? owned : buffer) : 0;  // fp32: the weights are the masters
  s.stepped = opt ? owned : static_cast<double>(sum.dense + sum.expert);
  s.optimizer = in.moment_bytes * s.stepped;
  // optim: each bucket's reduce-scatter lands in a kept fp32 slice (optimizer/grad_sync.cpp).
  if (in.strategy == ShardingStrategy::Optim)
    s.grad_scratch = 4.0 * static_cast<double>((nd > 1 ? own_d : 0) + (ne > 1 ? own_e : 0));
  // The unit in backward plus the reductions in flight: at most kMaxReducesInFlight + 1 units'
  // gradients and slices at the peak (the largest units bound it).
  // Deferred weight gradients: every unit's gradient is whole until the step's end.
  if (grads)
    s.transient += sum_largest(
        grad_pieces, in.deferred_weight_grads ? grad_pieces.size() : kMaxReducesInFlight + 1);
  if (weights) s.transient += sum_largest(gathered, kGatheredUnits);
  // Offload (ParamStore::offload_masters, optimizer/offload.h): the first segments holding this
  // fraction of the owned elements keep fp32 masters and moments in host memory; in fp32 too,
  // where the host master is a copy of the device's weights.
  if (in.offload > 0) {
    s.host_offloaded = in.offload * (4 + in.moment_bytes) * s.stepped;
    s.master *= 1 - in.offload;
    s.optimizer *= 1 - in.offload;
  }
  return s;
}

ShardedState fill_state(const ShardingInputs& in, MemoryBreakdown& m) {
  const ShardedState st = sharded_state(in);
  m.weights = st.weights;
  m.gradients = st.gradients;
  m.master = st.master;
  m.optimizer = st.optimizer;
  m.grad_scratch = st.grad_scratch;
  m.host_offloaded = st.host_offloaded;
  m.sharding_transient = st.transient;
  // The masters + moments wherever they live, without and with the distributed optimizer.
  ShardingInputs whole = in;
  whole.offload = 0;
  whole.strategy = ShardingStrategy::NoShard;
  const ShardedState none = sharded_state(whole);
  m.optimizer_without_distributed = none.master + none.optimizer;
  whole.strategy = ShardingStrategy::Optim;
  const ShardedState optim = sharded_state(whole);
  m.optimizer_with_distributed = optim.master + optim.optimizer;
  return st;
}

void fill_totals(const ShardingInputs& in, double rest, MemoryBreakdown& m) {
  m.total = sharded_state(in).device() + rest;
  for (size_t s = 0; s < m.total_by_strategy.size(); ++s) {
    ShardingInputs other = in;
    other.strategy = static_cast<ShardingStrategy>(s);
    m.total_by_strategy[s] = sharded_state(other).device() + rest;
  }
}

namespace {

// Reductions overlap the backward (~2/3 of a micro-batch) but at least 20% stays exposed.
double exposed(double t, double window) { return std::max(0.2 * t, t - window); }

// The collectives the strategies are built from: seconds over their links, payload bytes.
struct ReduceTerms {
  double rs = 0, rs_bytes = 0;             // fp32 gradients reduce-scattered over the shard groups
  double gather = 0, gather_bytes = 0;     // model-dtype weights all-gathered after the step
  double replicas = 0, replica_bytes = 0;  // hybrid: the owned shards over the replica group
  double unit_gathers = 0, unit_gather_bytes = 0;  // ZeRO-3: every unit, forward and backward
};

// ZeRO-2 and -3: every micro-batch reduces its own gradients as its backward ends (or, with
// deferred weight gradients, the step's end reduces them once: nothing left to overlap); ZeRO-3
// gathers every unit per micro-batch, prefetched behind compute.
DataParallelComm sharded_grads_comm(const ShardingInputs& in, const ReduceTerms& t,
                                    double compute_mb) {
  const double m = static_cast<double>(in.microbatches), backward = compute_mb * 2.0 / 3.0;
  DataParallelComm c;
  if (in.strategy == ShardingStrategy::OptimGrads) {
    c.gather_exposed = t.gather;
    if (in.deferred_weight_grads) {
      c.bytes = t.rs_bytes + t.gather_bytes + t.replica_bytes;
      c.grads_exposed = t.rs + t.replicas;
      return c;
    }
    // The earlier micro-batches' reductions also overlap the next micro-batch's forward.
    c.bytes = m * t.rs_bytes + t.gather_bytes + t.replica_bytes;
    c.grads_exposed =
        exposed(t.rs, backward) + (m - 1) * std::max(0.0, t.rs - compute_mb) + t.replicas;
    return c;
  }
  const double g = t.unit_gathers;
  if (in.deferred_weight_grads) {
    const double share = g > 0 ? exposed(g, compute_mb) / g : 0.0;
    c.gather_exposed = m * g * share;
    c.bytes = t.rs_bytes + m * t.unit_gather_bytes + t.replica_bytes;
    c.grads_exposed = t.rs + t.replicas;
    return c;
  }
  const double per_mb = g + t.rs;
  const double share = per_mb > 0 ? exposed(per_mb, compute_mb) / per_mb : 0.0;
  c.bytes = m * (t.rs_bytes + t.unit_gather_bytes) + t.replica_bytes;
  c.grads_exposed = m * t.rs * share + t.replicas;
  c.gather_exposed = m * g * share;
  return c;
}

}  // namespace

DataParallelComm data_parallel_comm(const ShardingInputs& in, const DataParallelLinks& links,
                                    double compute_mb) {
  const Totals sum = totals(in);
  const int64_t nd = in.shard_group(), ne = std::max<int64_t>(in.expert_dp, 1);
  const int64_t k = in.strategy == ShardingStrategy::NoShard ? 1 : in.dp / nd;
  const double w = in.wbytes;
  const double dense = static_cast<double>(sum.dense), expert = static_cast<double>(sum.expert),
               frozen = static_cast<double>(sum.frozen);
  // Payload over a group of one moves nothing.
  auto over = [](double bytes, int64_t group) { return group > 1 ? bytes : 0.0; };
  const double backward = compute_mb * 2.0 / 3.0;
  // ZeRO++ (distributed/quantized_comm.h): int8 plus an fp32 scale per 256 elements.
  constexpr double kInt8Bytes = 1.0 + 4.0 / 256;
  const bool per_unit = in.strategy == ShardingStrategy::OptimGrads ||
                        in.strategy == ShardingStrategy::OptimGradsParams;
  const double gb = in.quantized_grads && per_unit ? kInt8Bytes : 4.0;
  const double ub = in.quantized_weights ? kInt8Bytes : w;
  ReduceTerms t;
  t.rs = ring_gather(gb * dense, nd, links.shard) + ring_gather(gb * expert, ne, links.experts);
  t.rs_bytes = over(gb * dense, nd) + over(gb * expert, ne);
  t.gather = ring_gather(w * dense, nd, links.shard) + ring_gather(w * expert, ne, links.experts);
  t.gather_bytes = over(w * dense, nd) + over(w * expert, ne);
  // Not overlapped; MoE models are not hybrid-sharded (recipe validation).
  t.replica_bytes = k > 1 ? 4.0 * static_cast<double>(cdiv(sum.dense, nd)) : 0.0;
  t.replicas = ring_all_reduce(t.replica_bytes, k, links.replicas);
  t.unit_gathers = ring_gather(2 * ub * (dense + frozen), nd, links.shard) +
                   ring_gather(2 * ub * expert, ne, links.experts);
  t.unit_gather_bytes = over(2 * ub * (dense + frozen), nd) + over(2 * ub * expert, ne);
  DataParallelComm c;
  switch (in.strategy) {
    case ShardingStrategy::NoShard: {
      if (in.topk_ratio > 0) {  // each rank's sparse set, gathered from every rank
        const double sd = 8 * in.topk_ratio * dense, se = 8 * in.topk_ratio * expert;
        c.bytes = over(sd, nd) + over(se, ne);
        c.grads_exposed = exposed(ring_gather(sd * static_cast<double>(nd), nd, links.shard) +
                                      ring_gather(se * static_cast<double>(ne), ne, links.experts),
                                  backward);
        break;
      }
      if (in.onebit_adam) {
        // optimizer/onebit_compression.h: 1 bit + 4 bytes per 256-element block, sent whole to
        // the all-to-all (every server's chunk) and this rank's chunk once more to the gather.
        constexpr double kBytesPerElement = 1.0 / 8 + 4.0 / 256;
        const double md = kBytesPerElement * dense, me = kBytesPerElement * expert;
        c.bytes = over(md * (1 + 1.0 / static_cast<double>(nd)), nd) +
                  over(me * (1 + 1.0 / static_cast<double>(ne)), ne);
        c.grads_exposed =
            2 * (ring_gather(md, nd, links.shard) + ring_gather(me, ne, links.experts));
        break;
      }
      const double ar = ring_all_reduce(4 * dense, nd, links.shard) +
                        ring_all_reduce(4 * expert, ne, links.experts);
      c.bytes = t.rs_bytes;
      c.grads_exposed = exposed(ar, backward);
      break;
    }
    case ShardingStrategy::Optim:
      c.bytes = t.rs_bytes + t.gather_bytes + t.replica_bytes;
      c.grads_exposed = exposed(t.rs, backward) + t.replicas;
      c.gather_exposed = t.gather;
      break;
    case ShardingStrategy::OptimGrads:
    case ShardingStrategy::OptimGradsParams:
      c = sharded_grads_comm(in, t, compute_mb);
      break;
  }
  return c;
}

double optimizer_step_seconds(const ShardingInputs& in, const ShardedState& s,
                              double device_bandwidth) {
  const double device = (1 - in.offload) * s.stepped * (kAdamBytes + in.wbytes) / device_bandwidth;
  // Offloaded chunks are pipelined: transfers overlap the host step, the slower one bounds.
  const double host = in.offload * s.stepped *
                      std::max((4 + in.wbytes) / kPcieBytesPerS, kAdamBytes / kHostAdamBytesPerS);
  return device + host;
}

}  // namespace megatron::planning::detail
