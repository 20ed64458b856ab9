#pragma once
// Fully sharded data parallelism over a ParamStore whose gradients (ZeRO-2, optim_grads) and
// possibly weights (ZeRO-3 / FSDP, optim_grads_params) are kept only as this rank's shards
// (megatron/params/sharding.h). The models announce each parameter unit's use (UnitHooks):
//
//  - weights sharded: before a unit's forward or backward its pieces are all-gathered (in the
//    model dtype) into transient buffers the parameters' weight views point into; after it the
//    buffers are freed, unless the unit is the next one used. During training steps the unit
//    order recorded in the first step is replayed to start the gather of the next unit as soon
//    as the current one is in use, so communication overlaps compute.
//  - gradients sharded: before a unit's backward its trainable pieces get zeroed fp32 storage
//    the parameters' grad views point into; after it they are reduce-scattered (asynchronously)
//    and this rank's slice is added into its gradient shard, then the storage is freed. Every
//    micro-batch's gradients are reduced as their backward ends, so no full-size gradient buffer
//    exists. Hybrid sharding all-reduces the accumulated shards over the replica group once per
//    step.
//  - weight gradients deferred (a pipeline schedule with W passes, set_deferred_weight_grads):
//    a unit's gradient storage stays bound from its first backward to the end of the step, since
//    W's after its backward still add into it; the step's end (finish_step, after the stage's
//    last W) reduce-scatters every unit. The stage then holds its whole fp32 gradient during the
//    step, as Megatron's distributed optimizer does.
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "megatron/distributed/quantized_comm.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/params/unit_hooks.h"

namespace megatron::distributed {

struct ShardGroups {
  parallel::Communicator* dense = nullptr;     // the dense and frozen regions' shard group
  parallel::Communicator* expert = nullptr;    // the experts' (expert data parallel); may be null
  parallel::Communicator* replicas = nullptr;  // hybrid sharding's replica group, or null
};

class FullyShardedUnits final : public UnitHooks {
 public:
  FullyShardedUnits(ParamStore& store, ShardGroups groups);
  ~FullyShardedUnits() override;

  // A training step starts: the first records the unit order, later ones replay it to prefetch.
  void begin_step();
  // The step's backward is over: completes every gradient reduction (into the shards, then over
  // the replicas) and frees whatever is still gathered.
  void finish_step();
  // Whether weight gradients may be computed after their unit's backward (see above).
  void set_deferred_weight_grads(bool deferred) { deferred_ = deferred; }
  // ZeRO++ (distributed/quantized_comm.h): weights gathered as int8 blocks
  // (parallel.zero_quantized_weights; the compute weights are then the decoded ones, identical
  // on every rank), gradients reduce-scattered as int8 blocks (parallel.zero_quantized_gradients).
  void set_quantized(bool weights, bool grads);

  void before_forward(int64_t unit) override { acquire(unit, false); }
  void after_forward(int64_t unit) override { release(unit, false); }
  void before_backward(int64_t unit) override { acquire(unit, true); }
  void after_backward(int64_t unit) override { release(unit, true); }

  // Bytes this rank handed to collectives since the last call.
  int64_t take_bytes() { return std::exchange(bytes_, 0); }
  // Units whose weights are gathered now (tests: at most the current and the prefetched ones).
  int64_t resident_units() const;

 private:
  struct Piece {
    ShardPiece layout;
    parallel::Communicator* group;
    std::vector<Parameter*> params;
  };
  enum class State : uint8_t { Released, Gathering, Resident };
  struct Unit {
    std::vector<size_t> pieces;  // indices into pieces_
    State state = State::Released;
    int users = 0, grad_users = 0;
    std::vector<Tensor> gathered;  // per piece (weights sharded)
    std::vector<std::unique_ptr<parallel::Work>> gathers;
    std::vector<QuantizedGather> quantized_gathers;  // per piece, with quantised weights
    std::vector<Tensor> grads;  // per piece (trainable pieces; during backward)
    bool grads_bound = false;
  };
  struct PendingReduce {
    size_t piece;
    Tensor full, shard;
    std::unique_ptr<parallel::Work> work;
    QuantizedReduceScatter quantized;  // with quantised gradients (then no work)
  };

  void acquire(int64_t unit, bool backward);
  void release(int64_t unit, bool backward);
  Unit& unit_at(int64_t unit);
  void start_gather(Unit& u);
  void wait_gather(Unit& u);
  void free_weights(Unit& u);
  void bind_grads(Unit& u);
  void reduce_grads(Unit& u);
  void complete_oldest_reduce();
  void release_idle();

  ParamStore* store_;
  ShardGroups groups_;
  bool weights_sharded_;
  std::vector<Piece> pieces_;
  std::vector<Unit> units_;
  std::deque<PendingReduce> reducing_;
  // The acquisition order of a training step (recorded once, replayed to prefetch).
  std::vector<int64_t> trace_;
  bool recording_ = false, recorded_ = false, replaying_ = false;
  bool deferred_ = false;
  bool quantized_weights_ = false, quantized_grads_ = false;
  size_t cursor_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace megatron::distributed
