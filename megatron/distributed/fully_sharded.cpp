#include "megatron/distributed/fully_sharded.h"

#include <algorithm>

#include "megatron/backend/ops.h"

namespace megatron::distributed {
namespace {

// Reductions of at most this many pieces are in flight before the oldest is completed: enough to
// overlap a layer's backward, few enough to keep the transient gradient memory a few units.
constexpr size_t kMaxReducesInFlight = 4;

}  // namespace

FullyShardedUnits::FullyShardedUnits(ParamStore& store, ShardGroups groups)
    : store_(&store), groups_(groups), weights_sharded_(store.sharding().weights) {
  MT_CHECK(store.finalized() && store.sharding().grads,
           "fully sharded units need a store with sharded gradients");
  MT_CHECK(groups.dense != nullptr, "fully sharded units without a shard group");
  if (groups_.replicas && groups_.replicas->size() == 1) groups_.replicas = nullptr;
  units_.resize(static_cast<size_t>(store.num_units()));
  std::vector<Parameter*> params = store.params();
  for (const ShardPiece& layout : store.pieces()) {
    MT_CHECK(layout.unit >= 0 && layout.unit < store.num_units(), "buffer piece [",
             layout.range.begin, ", ", layout.range.end, ") belongs to no unit");
    Piece piece;
    piece.layout = layout;
    piece.group = layout.region == BufferRegion::Expert ? groups_.expert : groups_.dense;
    MT_CHECK(piece.group != nullptr && piece.group->size() == layout.shards, "unit ", layout.unit,
             ": piece sharded ", layout.shards, " ways without a group of that size");
    for (Parameter* p : params)
      if (p->offset >= layout.range.begin && p->offset < layout.range.end &&
          p->local_shape.numel() > 0)
        piece.params.push_back(p);
    units_[static_cast<size_t>(layout.unit)].pieces.push_back(pieces_.size());
    pieces_.push_back(std::move(piece));
  }
  for (Unit& u : units_) {
    u.gathered.resize(u.pieces.size());
    u.grads.resize(u.pieces.size());
  }
}

FullyShardedUnits::~FullyShardedUnits() {
  for (Unit& u : units_)
    for (auto& w : u.gathers)
      if (w) w->wait();
  for (Unit& u : units_)
    for (QuantizedGather& q : u.quantized_gathers)
      if (q.work) q.work->wait();
  for (PendingReduce& r : reducing_) {
    if (r.work) r.work->wait();
    if (r.quantized.work) r.quantized.work->wait();
  }
}

FullyShardedUnits::Unit& FullyShardedUnits::unit_at(int64_t unit) {
  MT_CHECK(unit >= 0 && unit < static_cast<int64_t>(units_.size()), "parameter unit ", unit,
           " out of range (", units_.size(), " units)");
  return units_[static_cast<size_t>(unit)];
}

void FullyShardedUnits::begin_step() {
  replaying_ = recorded_;
  recording_ = !recorded_;
  if (recording_) trace_.clear();
  cursor_ = 0;
}

void FullyShardedUnits::acquire(int64_t id, bool backward) {
  Unit& u = unit_at(id);
  if (recording_) trace_.push_back(id);
  if (replaying_) {
    if (cursor_ < trace_.size() && trace_[cursor_] == id) {
      ++cursor_;
      // Prefetch: the next unit's gather runs while this one computes.
      if (weights_sharded_ && cursor_ < trace_.size()) {
        Unit& next = unit_at(trace_[cursor_]);
        if (next.state == State::Released) start_gather(next);
      }
    } else {
      replaying_ = false;  // another order (an evaluation, a changed schedule): record anew
      recorded_ = false;
    }
  }
  if (weights_sharded_) {
    if (u.state == State::Released) start_gather(u);
    if (u.state == State::Gathering) wait_gather(u);
    ++u.users;
  }
  if (backward) {
    if (!u.grads_bound) bind_grads(u);
    ++u.grad_users;
  }
}

void FullyShardedUnits::release(int64_t id, bool backward) {
  Unit& u = unit_at(id);
  if (backward) {
    MT_CHECK(u.grad_users > 0, "unit ", id, " released from a backward it did not begin");
    if (--u.grad_users == 0 && !deferred_) reduce_grads(u);
  }
  if (!weights_sharded_) return;
  MT_CHECK(u.users > 0, "unit ", id, " released more often than acquired");
  if (--u.users > 0) return;
  // Kept when it is the very next unit used (the last layer's forward is followed by its
  // backward).
  const bool next = replaying_ && cursor_ < trace_.size() && trace_[cursor_] == id;
  if (!next) free_weights(u);
}

void FullyShardedUnits::set_quantized(bool weights, bool grads) {
  MT_INPUT_CHECK(!(weights || grads) || store_->device() == Device::CPU,
                 "ZeRO++'s quantised communication runs on the CPU backend only so far");
  MT_CHECK(!weights || weights_sharded_, "quantised weight gathers without sharded weights");
  quantized_weights_ = weights;
  quantized_grads_ = grads;
}

void FullyShardedUnits::start_gather(Unit& u) {
  u.gathers.clear();
  u.quantized_gathers.clear();
  for (size_t i = 0; i < u.pieces.size(); ++i) {
    const Piece& piece = pieces_[u.pieces[i]];
    const ShardPiece& l = piece.layout;
    u.gathered[i] = Tensor::empty({l.range.size()}, store_->model_dtype(), store_->device());
    const Tensor shard = store_->weights().flat_view(l.shard_offset, {l.owned.size()});
    if (quantized_weights_) {
      u.quantized_gathers.push_back(start_quantized_gather(*piece.group, shard));
      bytes_ += static_cast<int64_t>(u.quantized_gathers.back().recv.nbytes());
      continue;
    }
    bytes_ += static_cast<int64_t>(u.gathered[i].nbytes());
    u.gathers.push_back(piece.group->all_gather_async(shard, u.gathered[i]));
  }
  u.state = State::Gathering;
}

void FullyShardedUnits::wait_gather(Unit& u) {
  for (auto& w : u.gathers) w->wait();
  u.gathers.clear();
  for (size_t i = 0; i < u.quantized_gathers.size(); ++i)
    finish_quantized_gather(u.quantized_gathers[i], u.gathered[i]);
  u.quantized_gathers.clear();
  for (size_t i = 0; i < u.pieces.size(); ++i) {
    const Piece& piece = pieces_[u.pieces[i]];
    for (Parameter* p : piece.params)
      p->weight = u.gathered[i].flat_view(p->offset - piece.layout.range.begin, p->local_shape);
  }
  u.state = State::Resident;
}

void FullyShardedUnits::free_weights(Unit& u) {
  if (u.state == State::Gathering) wait_gather(u);
  for (size_t i = 0; i < u.pieces.size(); ++i) {
    for (Parameter* p : pieces_[u.pieces[i]].params) p->weight = Tensor();
    u.gathered[i] = Tensor();
  }
  u.state = State::Released;
}

void FullyShardedUnits::bind_grads(Unit& u) {
  for (size_t i = 0; i < u.pieces.size(); ++i) {
    const Piece& piece = pieces_[u.pieces[i]];
    if (piece.layout.region == BufferRegion::Frozen) continue;
    u.grads[i] = Tensor::zeros({piece.layout.range.size()}, DType::F32, store_->device());
    for (Parameter* p : piece.params)
      p->grad = u.grads[i].flat_view(p->offset - piece.layout.range.begin, p->local_shape);
  }
  u.grads_bound = true;
}

void FullyShardedUnits::reduce_grads(Unit& u) {
  u.grads_bound = false;
  for (size_t i = 0; i < u.pieces.size(); ++i) {
    const Piece& piece = pieces_[u.pieces[i]];
    if (piece.layout.region == BufferRegion::Frozen) continue;
    for (Parameter* p : piece.params) p->grad = Tensor();
    PendingReduce r;
    r.piece = u.pieces[i];
    r.full = std::move(u.grads[i]);
    u.grads[i] = Tensor();
    r.shard = Tensor::empty({piece.layout.owned.size()}, DType::F32, store_->device());
    if (quantized_grads_) {
      // One tag per piece: the pieces in flight to the same peer never mix.
      r.quantized = start_quantized_reduce_scatter(*piece.group, r.full,
                                                   static_cast<int>(u.pieces[i] % 32768));
      bytes_ += static_cast<int64_t>(r.quantized.send.nbytes());
      r.full = Tensor();  // sent: its memory goes
    } else {
      bytes_ += static_cast<int64_t>(r.full.nbytes());
      r.work = piece.group->reduce_scatter_async(r.full, r.shard, parallel::ReduceOp::Sum);
    }
    reducing_.push_back(std::move(r));
    while (reducing_.size() > kMaxReducesInFlight) complete_oldest_reduce();
  }
}

void FullyShardedUnits::complete_oldest_reduce() {
  PendingReduce& r = reducing_.front();
  if (r.work)
    r.work->wait();
  else
    finish_quantized_reduce_scatter(r.quantized, *pieces_[r.piece].group, r.shard);
  const ShardPiece& l = pieces_[r.piece].layout;
  Tensor dst = store_->grads().flat_view(l.shard_offset, {l.owned.size()});
  ops::add_inplace(dst, r.shard);
  reducing_.pop_front();
}

void FullyShardedUnits::release_idle() {
  if (!weights_sharded_) return;
  for (Unit& u : units_)
    if (u.users == 0 && u.state != State::Released) free_weights(u);
}

void FullyShardedUnits::finish_step() {
  // Deferred weight gradients: every unit's, in unit order (the same on every rank of a group).
  for (Unit& u : units_)
    if (u.grads_bound) {
      MT_CHECK(u.grad_users == 0, "a unit's backward is still running at the step's end");
      reduce_grads(u);
    }
  while (!reducing_.empty()) complete_oldest_reduce();
  if (groups_.replicas) {
    Tensor& shards = store_->grads();
    bytes_ += static_cast<int64_t>(shards.nbytes());
    groups_.replicas->all_reduce(shards, parallel::ReduceOp::Sum);
  }
  if (recording_) {
    recording_ = false;
    recorded_ = true;
  }
  replaying_ = false;
  release_idle();
}

int64_t FullyShardedUnits::resident_units() const {
  int64_t n = 0;
  for (const Unit& u : units_) n += u.state != State::Released;
  return n;
}

}  // namespace megatron::distributed
