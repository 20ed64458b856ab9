#include "megatron/checkpoint/geometry.h"

#include <algorithm>

#include "megatron/core/error.h"

namespace megatron::checkpoint {

PieceGeometry PieceGeometry::whole(std::vector<int64_t> shape) {
  PieceGeometry g;
  g.offset.assign(shape.size(), 0);
  g.extent = shape;
  g.shape = std::move(shape);
  g.flat_begin = 0;
  g.flat_end = g.box_numel();
  return g;
}

int64_t PieceGeometry::box_numel() const {
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  return n;
}

std::optional<std::string> PieceGeometry::problem() const {
  if (offset.size() != shape.size() || extent.size() != shape.size())
    return concat("offset/extent have ", offset.size(), "/", extent.size(), " dims, shape has ",
                  shape.size());
  // Element counts stay well inside int64 (2^62) so index arithmetic cannot overflow.
  constexpr int64_t kMaxNumel = int64_t{1} << 62;
  int64_t numel = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) return concat("negative dim ", d, " in the shape");
    if (offset[d] < 0 || extent[d] < 0 || offset[d] > shape[d] || extent[d] > shape[d] - offset[d])
      return concat("box dim ", d, " [", offset[d], ", ", offset[d], " + ", extent[d],
                    ") is outside the shape's extent ", shape[d]);
    if (shape[d] && numel > kMaxNumel / shape[d]) return "the shape has too many elements";
    numel *= shape[d];
  }
  const int64_t n = box_numel();
  if (flat_begin < 0 || flat_begin > flat_end || flat_end > n)
    return concat("flat range [", flat_begin, ", ", flat_end, ") is not inside the box's ", n,
                  " elements");
  return std::nullopt;
}

int64_t PieceGeometry::global_index(int64_t i) const {
  int64_t local = flat_begin + i, global = 0, stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const int64_t coord = extent[d] ? local % extent[d] : 0;
    local = extent[d] ? local / extent[d] : 0;
    global += (coord + offset[d]) * stride;
    stride *= shape[d];
  }
  return global;
}

std::pair<int64_t, int64_t> PieceGeometry::global_span() const {
  if (count() == 0) return {0, 0};
  return {global_index(0), global_index(count() - 1) + 1};
}

// ---- RunCursor ---------------------------------------------------------------------------

RunCursor::RunCursor(const PieceGeometry& g) : g_(&g) {
  const int nd = static_cast<int>(g.shape.size());
  // The run dim: the last one the box does not span fully; the dims after it are contiguous.
  int run_dim = -1;
  for (int d = nd - 1; d >= 0; --d)
    if (g.extent[d] != g.shape[d]) {
      run_dim = d;
      break;
    }
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * g.shape[d + 1];
  for (int d = 0; d < nd; ++d) base_ += g.offset[d] * stride[d];
  if (run_dim < 0) {  // the whole tensor (or a scalar)
    run_len_ = g.box_numel();
  } else {
    run_len_ = g.extent[run_dim] * stride[run_dim];
    outer_dims_ = run_dim;
    for (int d = 0; d < run_dim; ++d) {
      outer_extent_.push_back(g.extent[d]);
      outer_stride_.push_back(stride[d]);
    }
  }
  if (g.count() == 0 || run_len_ == 0) {
    k_ = k_begin_ = k_end_ = 0;
    return;
  }
  k_begin_ = g.flat_begin / run_len_;
  k_end_ = (g.flat_end + run_len_ - 1) / run_len_;
  load(k_begin_);
}

int64_t RunCursor::run_start(int64_t k) const {
  int64_t global = base_;
  for (int d = outer_dims_ - 1; d >= 0; --d) {
    global += (k % outer_extent_[d]) * outer_stride_[d];
    k /= outer_extent_[d];
  }
  return global;
}

void RunCursor::load(int64_t k) {
  k_ = k;
  if (done()) return;
  const int64_t box_begin = k * run_len_;
  const int64_t lo = std::max(box_begin, g_->flat_begin);
  const int64_t hi = std::min(box_begin + run_len_, g_->flat_end);
  run_.global = run_start(k) + (lo - box_begin);
  run_.pos = lo - g_->flat_begin;
  run_.length = hi - lo;
}

void RunCursor::next() { load(k_ + 1); }

void RunCursor::seek(int64_t g) {
  if (done() || run_.global_end() > g) return;
  // Runs ascend; binary search the first k in (k_, k_end_) whose run ends after g. Clipping
  // only shortens the first and last runs, so box-run ends decide for all but the last run,
  // which is checked after.
  int64_t lo = k_ + 1, hi = k_end_;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (run_start(mid) + run_len_ > g)
      hi = mid;
    else
      lo = mid + 1;
  }
  load(lo);
  if (!done() && run_.global_end() <= g) load(k_end_);
}

// ---- overlaps ----------------------------------------------------------------------------

void for_each_overlap(const PieceGeometry& a, const PieceGeometry& b,
                      const std::function<void(const Overlap&)>& fn) {
  MT_CHECK(a.shape == b.shape, "overlap of pieces of different shapes");
  const auto [a_lo, a_hi] = a.global_span();
  const auto [b_lo, b_hi] = b.global_span();
  if (a_lo >= b_hi || b_lo >= a_hi) return;
  RunCursor ca(a), cb(b);
  ca.seek(b_lo);
  cb.seek(a_lo);
  Overlap pending{0, 0, 0};
  while (!ca.done() && !cb.done()) {
    const Run& ra = ca.run();
    const Run& rb = cb.run();
    if (ra.global_end() <= rb.global) {
      ca.seek(rb.global);
      continue;
    }
    if (rb.global_end() <= ra.global) {
      cb.seek(ra.global);
      continue;
    }
    const int64_t lo = std::max(ra.global, rb.global);
    const int64_t hi = std::min(ra.global_end(), rb.global_end());
    const Overlap o{ra.pos + (lo - ra.global), rb.pos + (lo - rb.global), hi - lo};
    // Merge with the previous overlap when contiguous on both sides.
    if (pending.length && pending.a_pos + pending.length == o.a_pos &&
        pending.b_pos + pending.length == o.b_pos) {
      pending.length += o.length;
    } else {
      if (pending.length) fn(pending);
      pending = o;
    }
    const bool a_first = ra.global_end() <= rb.global_end();
    const bool b_first = rb.global_end() <= ra.global_end();
    if (a_first) ca.next();
    if (b_first) cb.next();
  }
  if (pending.length) fn(pending);
}

std::optional<std::string> tiling_problem(const std::vector<int64_t>& shape,
                                          const std::vector<const PieceGeometry*>& pieces) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<std::pair<int64_t, int64_t>> runs;  // (global, length)
  for (const PieceGeometry* p : pieces)
    for (RunCursor c(*p); !c.done(); c.next()) runs.emplace_back(c.run().global, c.run().length);
  std::sort(runs.begin(), runs.end());
  int64_t covered = 0;
  for (const auto& [g, len] : runs) {
    if (g < covered) return concat("element ", g, " is held by more than one piece");
    if (g > covered) return concat("elements [", covered, ", ", g, ") are held by no piece");
    covered = g + len;
  }
  if (covered != numel) return concat("elements [", covered, ", ", numel, ") are held by no piece");
  return std::nullopt;
}

}  // namespace megatron::checkpoint
