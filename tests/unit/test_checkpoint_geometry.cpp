// Piece geometry against brute force: a piece's runs enumerate exactly its elements in order
// (and agree with Parameter::global_index for shards), seek lands on the right run, overlaps
// of random pieces match the element-wise intersection, and tiling finds gaps and doubles.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/geometry.h"

namespace megatron::checkpoint {
namespace {

// Global indices of a piece's elements, by walking its runs.
std::vector<int64_t> via_runs(const PieceGeometry& g) {
  std::vector<int64_t> out;
  int64_t expect_pos = 0;
  for (RunCursor c(g); !c.done(); c.next()) {
    EXPECT_EQ(c.run().pos, expect_pos);
    EXPECT_GT(c.run().length, 0);
    if (!out.empty()) {
      EXPECT_LT(out.back(), c.run().global);
    }
    for (int64_t i = 0; i < c.run().length; ++i) out.push_back(c.run().global + i);
    expect_pos += c.run().length;
  }
  return out;
}

PieceGeometry random_piece(std::mt19937& rng, const std::vector<int64_t>& shape) {
  PieceGeometry g;
  g.shape = shape;
  for (int64_t s : shape) {
    const int64_t a = static_cast<int64_t>(rng() % (s + 1)),
                  b = static_cast<int64_t>(rng() % (s + 1));
    // Often the full extent, as real shards are.
    if (rng() % 3 == 0) {
      g.offset.push_back(0);
      g.extent.push_back(s);
    } else {
      g.offset.push_back(std::min(a, b));
      g.extent.push_back(std::max(a, b) - std::min(a, b));
    }
  }
  const int64_t n = g.box_numel();
  g.flat_begin = 0;
  g.flat_end = n;
  if (n > 0 && rng() % 2) {
    const int64_t a = static_cast<int64_t>(rng() % (n + 1)),
                  b = static_cast<int64_t>(rng() % (n + 1));
    g.flat_begin = std::min(a, b);
    g.flat_end = std::max(a, b);
  }
  return g;
}

std::vector<int64_t> random_shape(std::mt19937& rng) {
  std::vector<int64_t> s(rng() % 5);  // 0-d (scalar) .. 4-d
  for (int64_t& d : s) d = static_cast<int64_t>(rng() % 6);
  return s;
}

TEST(CheckpointGeometry, RunsEnumerateThePieceInOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const PieceGeometry g = random_piece(rng, random_shape(rng));
    ASSERT_FALSE(g.problem()) << *g.problem();
    const auto runs = via_runs(g);
    ASSERT_EQ(static_cast<int64_t>(runs.size()), g.count());
    for (int64_t i = 0; i < g.count(); ++i) ASSERT_EQ(runs[i], g.global_index(i)) << i;
    if (g.count()) {
      EXPECT_EQ(g.global_span().first, runs.front());
      EXPECT_EQ(g.global_span().second, runs.back() + 1);
    }
  }
}

TEST(CheckpointGeometry, ShardPiecesAgreeWithParameterGlobalIndex) {
  for (const Shape& shape : {Shape{12}, Shape{6, 8}, Shape{4, 6, 10}, Shape{2, 4, 6, 4}}) {
    for (int dim = 0; dim < shape.ndim(); ++dim) {
      for (int64_t count : {1, 2}) {
        if (shape[dim] % count) continue;
        for (int64_t index = 0; index < count; ++index) {
          Parameter p;
          p.name = "w";
          p.global_shape = shape;
          p.local_shape = shape;
          p.local_shape[dim] = shape[dim] / count;
          p.shard = ShardSpec{dim, ShardAxis::Tensor, index, count};
          TensorPiece piece{"w", p.global_shape, p.local_shape, p.shard};
          const PieceGeometry g = piece.geometry();
          const auto runs = via_runs(g);
          ASSERT_EQ(static_cast<int64_t>(runs.size()), p.local_shape.numel());
          for (int64_t i = 0; i < p.local_shape.numel(); ++i)
            ASSERT_EQ(runs[i], p.global_index(i)) << shape.str() << " dim " << dim << " " << index;
          // A flat sub-range (a distributed-optimizer segment) is the same elements, cut.
          piece.flat_begin = 3;
          piece.flat_end = p.local_shape.numel() - 2;
          const auto cut = via_runs(piece.geometry());
          ASSERT_EQ(cut.size(), static_cast<size_t>(piece.flat_end - piece.flat_begin));
          for (size_t i = 0; i < cut.size(); ++i) ASSERT_EQ(cut[i], p.global_index(3 + i));
        }
      }
    }
  }
}

TEST(CheckpointGeometry, SeekFindsTheFirstRunEndingAfterAnIndex) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const PieceGeometry g = random_piece(rng, random_shape(rng));
    int64_t numel = 1;
    for (int64_t d : g.shape) numel *= d;
    std::vector<checkpoint::Run> runs;
    for (RunCursor c(g); !c.done(); c.next()) runs.push_back(c.run());
    const int64_t target = static_cast<int64_t>(rng() % (numel + 2));
    RunCursor c(g);
    c.seek(target);
    size_t k = 0;
    while (k < runs.size() && runs[k].global_end() <= target) ++k;
    if (k == runs.size()) {
      EXPECT_TRUE(c.done());
    } else {
      ASSERT_FALSE(c.done());
      EXPECT_EQ(c.run().global, runs[k].global);
      EXPECT_EQ(c.run().pos, runs[k].pos);
      EXPECT_EQ(c.run().length, runs[k].length);
    }
  }
}

TEST(CheckpointGeometry, OverlapsMatchTheElementwiseIntersection) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto shape = random_shape(rng);
    const PieceGeometry a = random_piece(rng, shape), b = random_piece(rng, shape);
    std::map<int64_t, int64_t> pos_a, pos_b;  // global -> position
    for (int64_t i = 0; i < a.count(); ++i) pos_a[a.global_index(i)] = i;
    for (int64_t i = 0; i < b.count(); ++i) pos_b[b.global_index(i)] = i;
    std::map<int64_t, int64_t> expected;  // position in a -> position in b
    for (const auto& [g, i] : pos_a)
      if (pos_b.count(g)) expected[i] = pos_b[g];
    std::map<int64_t, int64_t> got;
    int64_t last_a = -1;
    for_each_overlap(a, b, [&](const Overlap& o) {
      EXPECT_GT(o.length, 0);
      EXPECT_GT(o.a_pos, last_a);
      last_a = o.a_pos;
      for (int64_t k = 0; k < o.length; ++k)
        EXPECT_TRUE(got.emplace(o.a_pos + k, o.b_pos + k).second) << "element emitted twice";
    });
    ASSERT_EQ(got, expected) << "trial " << trial;
  }
}

TEST(CheckpointGeometry, ManyRowRunsAreMergedWhenContiguousOnBothSides) {
  // Two dim-1 halves of a [1000, 8] matrix against the whole: 1000 runs each, but against the
  // whole tensor the overlaps stay per row (the whole is contiguous, the half is not).
  PieceGeometry whole = PieceGeometry::whole({1000, 8});
  TensorPiece half{"w", Shape{1000, 8}, Shape{1000, 4}, ShardSpec{1, ShardAxis::Tensor, 1, 2}};
  int calls = 0;
  int64_t total = 0;
  for_each_overlap(whole, half.geometry(), [&](const Overlap& o) {
    ++calls;
    total += o.length;
    EXPECT_EQ(o.length, 4);
    EXPECT_EQ(o.a_pos, o.b_pos / 4 * 8 + 4);
  });
  EXPECT_EQ(calls, 1000);
  EXPECT_EQ(total, 4000);
  // The same piece against itself is one contiguous overlap.
  calls = 0;
  for_each_overlap(half.geometry(), half.geometry(), [&](const Overlap& o) {
    ++calls;
    EXPECT_EQ(o.length, 4000);
  });
  EXPECT_EQ(calls, 1);
}

TEST(CheckpointGeometry, TilingFindsGapsAndDoubles) {
  const Shape shape{6, 4};
  std::vector<PieceGeometry> halves;
  for (int64_t i = 0; i < 2; ++i)
    halves.push_back(
        TensorPiece{"w", shape, Shape{6, 2}, ShardSpec{1, ShardAxis::Tensor, i, 2}}.geometry());
  EXPECT_FALSE(tiling_problem({6, 4}, {&halves[0], &halves[1]}));
  EXPECT_THAT(*tiling_problem({6, 4}, {&halves[0]}), ::testing::HasSubstr("held by no piece"));
  EXPECT_THAT(*tiling_problem({6, 4}, {&halves[0], &halves[1], &halves[1]}),
              ::testing::HasSubstr("more than one piece"));
  // Flat segments of the halves, cut unevenly, still tile.
  std::vector<PieceGeometry> segs;
  for (const PieceGeometry& h : halves)
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 5}, {5, 5}, {5, 12}}) {
      PieceGeometry g = h;
      g.flat_begin = b;
      g.flat_end = e;
      segs.push_back(g);
    }
  std::vector<const PieceGeometry*> ptrs;
  for (const auto& g : segs) ptrs.push_back(&g);
  EXPECT_FALSE(tiling_problem({6, 4}, ptrs));
  // Scalars and empty tensors.
  const PieceGeometry scalar = PieceGeometry::whole({});
  EXPECT_FALSE(tiling_problem({}, {&scalar}));
  EXPECT_TRUE(tiling_problem({}, {}));
  EXPECT_FALSE(tiling_problem({0, 3}, {}));
}

TEST(CheckpointGeometry, InconsistentPiecesAreErrorsNamingThePiece) {
  auto expect_error = [](const TensorPiece& p, const char* what) {
    try {
      p.geometry();
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      if (!p.name.empty()) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("'w'"));
      }
      EXPECT_THAT(e.what(), ::testing::HasSubstr(what));
    }
  };
  expect_error({"w", Shape{4, 4}, Shape{4}, {}}, "ranks differ");
  expect_error({"w", Shape{4, 4}, Shape{2, 4}, {}}, "replicated piece");
  expect_error({"w", Shape{4, 4}, Shape{2, 4}, ShardSpec{0, ShardAxis::Tensor, 2, 2}},
               "shard index");
  expect_error({"w", Shape{4, 4}, Shape{2, 4}, ShardSpec{2, ShardAxis::Tensor, 0, 2}},
               "out of range");
  expect_error({"w", Shape{4, 4}, Shape{2, 2}, ShardSpec{0, ShardAxis::Tensor, 0, 2}},
               "dim 1 differs");
  expect_error({"w", Shape{5, 4}, Shape{2, 4}, ShardSpec{0, ShardAxis::Tensor, 0, 2}},
               "equal shards");
  expect_error({"w", Shape{4}, Shape{4}, {}, 3, 2}, "flat range");
  expect_error({"w", Shape{4}, Shape{4}, {}, 0, 5}, "flat range");
  expect_error({"", Shape{4}, Shape{4}, {}}, "empty name");
}

}  // namespace
}  // namespace megatron::checkpoint
