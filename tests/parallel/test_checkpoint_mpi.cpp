// mpirun-np: 2 4
// The collective checkpoint save under MPI: every rank holds a tensor-parallel shard (rows,
// columns, a 3-d middle dim, flat optimizer segments, one replicated bias written by rank 0),
// the save commits once, and a single rank loads whole tensors from it; a single rank's
// checkpoint loads as every rank's shard; a failure on one rank fails the save on all ranks
// and leaves `latest` alone.
#include <filesystem>

#include "megatron/checkpoint/checkpoint.h"
#include "parallel_test.h"
#include "tests/support/test_paths.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
namespace mp = megatron::parallel;
using json = nlohmann::json;
using mp::testing::world;

float value_of(const std::string& name, int64_t global, int64_t iteration) {
  return static_cast<float>(static_cast<int64_t>(name_hash(name) % 997) * 4096 + global +
                            iteration * 7);
}

struct Def {
  std::string name;
  Shape shape;
  int dim;
};
std::vector<Def> model(int64_t n) {
  return {{"w_col", {4 * n, 6}, 0},
          {"w_row", {6, 2 * n}, 1},
          {"w3", {3, 2 * n, 5}, 1},
          {"bias", {5}, -1}};
}

// Rank r of tp: its shard of each tensor, plus "m.w_col" as two flat pieces of its shard.
// tp == 1 gives whole tensors. Buffers are filled for `iteration` (or NaN when < 0).
struct Pieces {
  std::vector<std::vector<float>> buffers;
  std::vector<TensorPiece> pieces;
};
Pieces make(int64_t n, int r, int tp, int64_t iteration) {
  Pieces out;
  auto add = [&](TensorPiece p) {
    const PieceGeometry g = p.geometry();
    out.buffers.emplace_back(static_cast<size_t>(g.count()), std::nanf(""));
    if (iteration >= 0)
      for (int64_t i = 0; i < g.count(); ++i)
        out.buffers.back()[i] = value_of(p.name, g.global_index(i), iteration);
    out.pieces.push_back(p);
  };
  for (const Def& d : model(n)) {
    TensorPiece p{d.name, d.shape, d.shape};
    if (d.dim >= 0 && tp > 1) {
      p.local_shape[d.dim] /= tp;
      p.shard = ShardSpec{d.dim, ShardAxis::Tensor, r, tp};
    }
    add(p);
    if (d.name == "w_col") {
      const int64_t local = p.local_shape.numel();
      p.name = "m.w_col";
      for (auto [b, e] : {std::pair<int64_t, int64_t>{0, 7}, {7, local}}) {
        p.flat_begin = b;
        p.flat_end = e;
        add(p);
      }
    }
  }
  for (size_t i = 0; i < out.pieces.size(); ++i)
    out.pieces[i].data = out.pieces[i].dest = out.buffers[i].data();
  return out;
}

void expect_values(const Pieces& p, int64_t iteration) {
  for (const TensorPiece& piece : p.pieces) {
    const PieceGeometry g = piece.geometry();
    for (int64_t i = 0; i < g.count(); ++i)
      ASSERT_EQ(piece.dest[i], value_of(piece.name, g.global_index(i), iteration))
          << piece.name << " element " << i;
  }
}

class CheckpointMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = concat(MEGATRON_BINARY_DIR, "/test_checkpoint_mpi_np", world().size(), "_",
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (world().rank() == 0) fs::remove_all(dir_);
    world().barrier();
  }
  void TearDown() override {
    world().barrier();
    if (world().rank() == 0) fs::remove_all(dir_);
  }
  // The collective save of each rank's tp shard.
  void save_shards(int64_t iteration) {
    const int n = world().size(), r = world().rank();
    Pieces p = make(n, r, n, iteration);
    SaveRequest req;
    req.dir = dir_;
    req.iteration = iteration;
    req.metadata = {{"written_by", r}, {"iteration", iteration}};  // rank 0's is kept
    req.pieces = p.pieces;
    req.write_this_rank_replicas = r == 0;
    save(req, world(), /*keep_last=*/2);
  }
  std::string dir_;
};

TEST_F(CheckpointMpi, TensorParallelShardsLoadAsOneRank) {
  const int n = world().size();
  save_shards(1);
  save_shards(2);
  EXPECT_EQ(latest_iteration(dir_), 2);
  // Not collective: every rank reads the whole model, as a single-process run would.
  Pieces whole = make(n, 0, 1, -1);
  const json meta = load(LoadRequest{dir_, std::nullopt, whole.pieces});
  EXPECT_EQ(meta, json({{"written_by", 0}, {"iteration", 2}}));
  expect_values(whole, 2);
  Pieces old = make(n, 0, 1, -1);
  load(LoadRequest{dir_, 1, old.pieces});
  expect_values(old, 1);
  const CheckpointIndex index = read_index(dir_);
  EXPECT_EQ(index.files.size(), static_cast<size_t>(n));
  EXPECT_EQ(index.tensors.at("w_row").pieces.size(), static_cast<size_t>(n));
  EXPECT_EQ(index.tensors.at("m.w_col").pieces.size(), static_cast<size_t>(2 * n));
  EXPECT_EQ(index.tensors.at("bias").pieces.size(), 1u);
  EXPECT_NO_THROW(verify_files(index));
  // And as half as many shards (tp n -> n / 2).
  if (n >= 2) {
    const int tp = n / 2;
    Pieces half = make(n, world().rank() % tp, tp, -1);
    load(LoadRequest{dir_, std::nullopt, half.pieces});
    expect_values(half, 2);
  }
}

TEST_F(CheckpointMpi, OneRanksCheckpointLoadsAsEveryRanksShard) {
  const int n = world().size(), r = world().rank();
  if (r == 0) {
    auto single = mp::make_single_process_communicator("single");
    Pieces whole = make(n, 0, 1, 5);
    SaveRequest req;
    req.dir = dir_;
    req.iteration = 5;
    req.pieces = whole.pieces;
    save(req, *single, 1);
  }
  world().barrier();
  Pieces mine = make(n, r, n, -1);
  load(LoadRequest{dir_, std::nullopt, mine.pieces});
  expect_values(mine, 5);
}

TEST_F(CheckpointMpi, AFailingRankFailsTheSaveEverywhere) {
  const int n = world().size(), r = world().rank();
  save_shards(1);
  Pieces p = make(n, r, n, 2);
  SaveRequest req;
  req.dir = dir_;
  req.iteration = 2;
  req.pieces = p.pieces;
  req.write_this_rank_replicas = r == 0;
  if (r == n - 1) req.pieces[0].local_shape = Shape{1, 1};  // inconsistent piece on the last rank
  bool threw = false;
  try {
    save(req, world(), 2);
  } catch (const Error& e) {
    threw = true;
    const std::string what = e.what();
    EXPECT_NE(what.find(concat("rank ", n - 1, ": ")), std::string::npos) << what;
    EXPECT_NE(what.find("w_col"), std::string::npos) << what;
    EXPECT_NE(what.back(), ' ') << what;  // no dangling "; " (the last rank's error ends it)
    EXPECT_NE(what.back(), ';') << what;
  }
  EXPECT_TRUE(threw);
  EXPECT_EQ(latest_iteration(dir_), 1);
  world().barrier();
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 2)));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  world().barrier();  // everyone has looked before the next save creates its temporary
  // The next save works.
  save_shards(3);
  EXPECT_EQ(latest_iteration(dir_), 3);
}

}  // namespace
}  // namespace megatron::checkpoint
