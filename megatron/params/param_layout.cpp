// ParamStore's layout: parameter offsets in the virtual buffer, the pieces data parallelism cuts it
// into, what this rank stores of each buffer, and the owned segments (sharding.h).
#include <algorithm>

#include "megatron/backend/ops.h"
#include "megatron/params/parameter.h"

namespace megatron {

void DataParallelSharding::validate() const {
  MT_CHECK(!weights || grads, "sharded weights need sharded gradients (ZeRO-3 includes ZeRO-2)");
  MT_CHECK(!grads || optimizer, "sharded gradients need a sharded optimizer (ZeRO-2 includes 1)");
  MT_CHECK(dense_size >= 1 && 0 <= dense_rank && dense_rank < dense_size, "dense shard group rank ",
           dense_rank, " of ", dense_size);
  MT_CHECK(expert_size >= 1 && 0 <= expert_rank && expert_rank < expert_size,
           "expert shard group rank ", expert_rank, " of ", expert_size);
  MT_CHECK(bucket_elements >= 1, "bucket_elements ", bucket_elements);
  MT_CHECK(offload_fraction >= 0.0 && offload_fraction <= 1.0, "offload fraction ",
           offload_fraction, " outside [0, 1]");
}

int64_t ParamStore::begin_unit() {
  MT_CHECK(!finalized_, "begin_unit after the store was finalized");
  // The first call names unit 0 when nothing was registered yet.
  if (!params_.empty() || current_unit_ != 0) current_unit_ = units_++;
  return current_unit_;
}

std::vector<Parameter*> ParamStore::unit_params(int64_t unit) {
  std::vector<Parameter*> out;
  for (auto& p : params_)
    if (p->unit == unit) out.push_back(p.get());
  return out;
}

namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

BufferRegion region_of(const Parameter& p) {
  return p.frozen ? BufferRegion::Frozen : p.expert ? BufferRegion::Expert : BufferRegion::Dense;
}

}  // namespace

// Offsets and pieces. Per-unit pieces: each run of one unit's parameters within a region is a
// piece padded to a multiple of its group. Buckets: each trainable region padded to a multiple
// of its group (1 without a sharded optimizer) and cut into bucket_elements-sized pieces.
void ParamStore::lay_out() {
  const DataParallelSharding& sh = sharding_;
  auto group_of = [&](BufferRegion r) {
    return r == BufferRegion::Expert ? std::pair{sh.expert_size, sh.expert_rank}
                                     : std::pair{sh.dense_size, sh.dense_rank};
  };
  int64_t at = 0;
  total_ = 0;
  pieces_.clear();
  auto close_piece = [&](BufferRegion region) {
    if (pieces_.empty() || pieces_.back().region != region) return;
    ShardPiece& last = pieces_.back();
    last.range.end = at = last.range.begin + round_up(at - last.range.begin, last.shards);
  };
  auto place_region = [&](BufferRegion region) {
    const auto [size, rank] = group_of(region);
    const int64_t shards = sh.optimizer ? size : 1;
    const int64_t region_begin = at;
    // Frozen weights are never reduced: pieces of their own only when the weights are sharded.
    const bool unit_pieces = sh.per_unit() && (region != BufferRegion::Frozen || sh.weights);
    for (auto it = params_.rbegin(); it != params_.rend(); ++it) {
      Parameter& p = **it;
      if (region_of(p) != region) continue;
      if (unit_pieces &&
          (pieces_.empty() || pieces_.back().region != region || pieces_.back().unit != p.unit)) {
        close_piece(region);
        ShardPiece piece;
        piece.range = {at, at};
        piece.region = region;
        piece.unit = p.unit;
        piece.shards = shards;
        pieces_.push_back(piece);
      }
      p.offset = at;
      at += p.local_shape.numel();
      total_ += p.local_shape.numel();
    }
    if (unit_pieces) {
      close_piece(region);
      return;
    }
    if (region == BufferRegion::Frozen) return;
    at = region_begin + round_up(at - region_begin, shards);
    const int64_t step = std::max<int64_t>(round_up(sh.bucket_elements, shards), shards);
    for (int64_t b = region_begin; b < at; b += step) {
      ShardPiece piece;
      piece.range = {b, std::min(b + step, at)};
      piece.region = region;
      piece.unit = -1;
      piece.shards = shards;
      pieces_.push_back(piece);
    }
  };
  place_region(BufferRegion::Dense);
  expert_begin_ = at;
  place_region(BufferRegion::Expert);
  trainable_end_ = at;
  place_region(BufferRegion::Frozen);
  buffer_end_ = at;
  // Owned slices and their shard coordinates (trainable pieces first: they are first).
  int64_t shard_at = 0;
  for (ShardPiece& piece : pieces_) {
    const int64_t rank = group_of(piece.region).second;
    const int64_t len = piece.range.size() / piece.shards;
    const int64_t me = piece.shards > 1 ? rank : 0;
    piece.owned = {piece.range.begin + me * len, piece.range.begin + (me + 1) * len};
    piece.shard_offset = shard_at;
    shard_at += len;
    if (piece.region != BufferRegion::Frozen) owned_trainable_ = shard_at;
  }
  owned_all_ = shard_at;
}

void ParamStore::finalize(DType model_dtype, const DataParallelSharding& sharding) {
  MT_CHECK(!finalized_, "ParamStore finalized twice");
  MT_CHECK(model_dtype == DType::F32 || model_dtype == DType::BF16 || model_dtype == DType::F16,
           "model dtype must be fp32, bf16 or fp16, got ", dtype_name(model_dtype));
  sharding.validate();
  model_dtype_ = model_dtype;
  sharding_ = sharding;
  lay_out();
  const Device device = device_;
  weights_ = Tensor::zeros({sharding_.weights ? owned_all_ : buffer_end_}, model_dtype, device);
  grads_ = Tensor::zeros({sharding_.grads ? owned_trainable_ : trainable_end_}, DType::F32, device);
  if (mixed_precision() && sharding_.offload_fraction == 0.0)
    masters_ = Tensor::zeros({sharding_.optimizer ? owned_trainable_ : trainable_end_}, DType::F32,
                             device);
  for (auto& p : params_) {
    p->weight = sharding_.weights ? Tensor() : weights_.flat_view(p->offset, p->local_shape);
    p->grad = p->frozen || sharding_.grads ? Tensor() : grads_.flat_view(p->offset, p->local_shape);
  }
  bind_segments();
  if (sharding_.offload_fraction > 0.0) offload_masters();
  finalized_ = true;
}

// Offload: the first segments holding offload_fraction of the owned elements keep their masters
// in host memory, the rest in a device buffer (both packed in segment order).
void ParamStore::offload_masters() {
  int64_t total = 0;
  for (const ParamSegment& s : segments_) total += s.size();
  const double limit = sharding_.offload_fraction * static_cast<double>(total);
  int64_t at = 0, host = 0, on_device = 0;
  for (ParamSegment& s : segments_) {
    s.offloaded = static_cast<double>(at) < limit;
    at += s.size();
    if (s.offloaded) {
      s.master_at = host;
      host += s.size();
    } else if (mixed_precision()) {
      s.master_at = on_device;
      on_device += s.size();
    }
  }
  host_masters_memory_ = PinnedHostBuffer(static_cast<size_t>(host) * sizeof(float), device_);
  host_masters_ = Tensor::wrap(host_masters_memory_.data(), {host}, DType::F32, Device::CPU);
  if (mixed_precision()) masters_ = Tensor::zeros({on_device}, DType::F32, device_);
  for (ParamSegment& s : segments_) {
    if (s.offloaded)
      s.master = host_masters_.flat_view(s.master_at, {s.size()});
    else if (mixed_precision())
      s.master = masters_.flat_view(s.master_at, {s.size()});
  }
}

// Segments: each owned slice cut at parameter boundaries, with views of its elements in whatever
// form each buffer is kept.
void ParamStore::bind_segments() {
  segments_.clear();
  frozen_segments_.clear();
  std::vector<Parameter*> by_offset;
  for (auto& p : params_) by_offset.push_back(p.get());
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Parameter* a, const Parameter* b) { return a->offset < b->offset; });
  int64_t state = 0;
  auto add_segments = [&](const ShardPiece& piece, bool frozen) {
    // Parameters overlapping the owned slice (first whose end passes its start, then on).
    auto it = std::lower_bound(
        by_offset.begin(), by_offset.end(), piece.owned.begin,
        [](const Parameter* p, int64_t at) { return p->offset + p->local_shape.numel() <= at; });
    for (; it != by_offset.end() && (*it)->offset < piece.owned.end; ++it) {
      Parameter* p = *it;
      if (p->frozen != frozen) continue;
      const int64_t lo = std::max(piece.owned.begin, p->offset);
      const int64_t hi = std::min(piece.owned.end, p->offset + p->local_shape.numel());
      if (lo >= hi) continue;
      ParamSegment s;
      s.param = p;
      s.begin = lo - p->offset;
      s.end = hi - p->offset;
      const int64_t shard_at = piece.shard_offset + (lo - piece.owned.begin);
      s.weight_at = sharding_.weights ? shard_at : lo;
      s.weight = weights_.flat_view(s.weight_at, {hi - lo});
      if (!frozen) {
        s.state_offset = state;
        state += hi - lo;
        s.grad_at = sharding_.grads ? shard_at : lo;
        s.grad = grads_.flat_view(s.grad_at, {hi - lo});
        if (mixed_precision()) {
          s.master_at = sharding_.optimizer ? shard_at : lo;
          // (Offload packs the masters afterwards: offload_masters.)
          if (masters_.defined()) s.master = masters_.flat_view(s.master_at, {hi - lo});
        } else {
          s.master_at = s.weight_at;
          s.master = s.weight;
        }
      }
      (frozen ? frozen_segments_ : segments_).push_back(s);
    }
  };
  for (const ShardPiece& piece : pieces_) add_segments(piece, piece.region == BufferRegion::Frozen);
  // Without frozen pieces (weights whole) the frozen weights have no segments: they are saved
  // and loaded whole, like every weight then.
}

void ParamStore::refresh_model_weights(const ParamSegment& s) {
  if (s.size() == 0) return;
  Tensor model = s.weight;
  if (s.offloaded) {  // the host master, rounded on the host, then copied to the device
    if (!mixed_precision()) {
      model.copy_from(s.master);
      return;
    }
    Tensor staged = Tensor::empty({s.size()}, model_dtype_, Device::CPU);
    ops::cast(s.master, staged);
    model.copy_from(staged);
    return;
  }
  if (!mixed_precision()) return;
  ops::cast(s.master, model);
}

void ParamStore::refresh_model_weights() {
  for (const ParamSegment& s : segments_) refresh_model_weights(s);
}

}  // namespace megatron
