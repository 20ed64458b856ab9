#pragma once
// Which elements of a global tensor a checkpoint piece holds, and how two pieces overlap.
//
// A piece is a box (hyper-rectangle) [offset, offset + extent) of a row-major global tensor,
// optionally cut to the flat range [flat_begin, flat_end) of the box's own row-major order.
// A Parameter's local shard is such a box (offset = shard index x local extent along the split
// dim); a distributed-optimizer Segment is its flat sub-range. The piece's elements, numbered
// 0 .. count() - 1 in box order, are how the piece sits in memory and in a file.
//
// In global flat indices a box is a sequence of equally long contiguous runs: with d the last
// dim the box does not span fully, each run is extent[d] x prod(shape[d+1:]) elements, one per
// coordinate of the dims before d. Runs ascend in both global index and piece position, so two
// pieces intersect by merging their run sequences (RunCursor + for_each_overlap); nothing is
// materialised per element.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace megatron::checkpoint {

struct PieceGeometry {
  std::vector<int64_t> shape;   // the global tensor's shape
  std::vector<int64_t> offset;  // box start, per dim
  std::vector<int64_t> extent;  // box size, per dim
  int64_t flat_begin = 0;       // range of the box's row-major order held by the piece
  int64_t flat_end = 0;

  // The whole tensor.
  static PieceGeometry whole(std::vector<int64_t> shape);
  int64_t box_numel() const;
  int64_t count() const { return flat_end - flat_begin; }
  bool is_full_box() const { return flat_begin == 0 && flat_end == box_numel(); }
  // nullopt when consistent, else what is wrong (offsets outside the shape, bad flat range...).
  std::optional<std::string> problem() const;
  // Global flat index of piece element i (0 <= i < count()).
  int64_t global_index(int64_t i) const;
  // [first, last + 1) global flat indices touched (empty piece: {0, 0}).
  std::pair<int64_t, int64_t> global_span() const;
  bool operator==(const PieceGeometry&) const = default;
};

// One contiguous run of a piece: `length` elements starting at global flat index `global`,
// held at piece positions [pos, pos + length).
struct Run {
  int64_t global = 0, pos = 0, length = 0;
  int64_t global_end() const { return global + length; }
};

// Walks a piece's runs in ascending order. The geometry must outlive the cursor and be valid.
class RunCursor {
 public:
  explicit RunCursor(const PieceGeometry& g);
  bool done() const { return k_ >= k_end_; }
  const Run& run() const { return run_; }
  void next();
  // Skips to the first run that ends after global index g (never moves backwards).
  void seek(int64_t g);
  int64_t num_runs() const { return k_end_ - k_begin_; }

 private:
  int64_t run_start(int64_t k) const;  // global start of box run k (unclipped)
  void load(int64_t k);
  const PieceGeometry* g_;
  int outer_dims_ = 0;                                // dims before the run dim
  int64_t run_len_ = 0;                               // elements per box run
  std::vector<int64_t> outer_extent_, outer_stride_;  // per outer dim: box extent, global stride
  int64_t base_ = 0;                                  // global index of the box's first element
  int64_t k_ = 0, k_begin_ = 0, k_end_ = 0;
  Run run_;
};

// Elements both pieces hold (same global shape), as maximal runs: `length` elements at piece
// positions [a_pos, ...) of a and [b_pos, ...) of b. Emitted in ascending global order.
struct Overlap {
  int64_t a_pos, b_pos, length;
};
void for_each_overlap(const PieceGeometry& a, const PieceGeometry& b,
                      const std::function<void(const Overlap&)>& fn);

// Whether `pieces` together hold every element of a tensor of `shape` exactly once. On failure
// returns a description of the first gap or double coverage (global flat index).
std::optional<std::string> tiling_problem(const std::vector<int64_t>& shape,
                                          const std::vector<const PieceGeometry*>& pieces);

}  // namespace megatron::checkpoint
