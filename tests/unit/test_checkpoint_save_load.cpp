// Sharded save/load with simulated ranks (write_rank_shard per rank + finalize, as the
// collective save does): every TP/DP layout, with and without distributed-optimizer flat
// segments, loads every other layout's checkpoint; metadata-only checkpoints; the collective save
// on one process; latest/keep_last/protect; re-saving an iteration; leftovers; several pieces of
// one tensor per rank; strided row splits; pieces from parameters and optimizer segments.
// Damaged or mismatched checkpoints: test_checkpoint_save_load_errors.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/training/checkpoint_pieces.h"
#include "tests/support/checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

optim::Segment segment(Parameter* p, int64_t begin, int64_t end, int64_t state_offset) {
  optim::Segment s;
  s.param = p;
  s.begin = begin;
  s.end = end;
  s.state_offset = state_offset;
  return s;
}

namespace fs = std::filesystem;
using testing::CheckpointTest;
using testing::expect_values;
using testing::Layout;
using testing::rank_pieces;
using testing::value_of;
using training::param_piece;
using training::segment_piece;
using json = nlohmann::json;
using ::testing::HasSubstr;

TEST_F(CheckpointTest, RoundTripKeepsValuesAndMetadata) {
  const json meta = {{"recipe", {{"model", {{"num_layers", 2}}}, {"seed", 1234}}},
                     {"consumed_samples", 4096},
                     {"rng", {1, 2, 3}}};
  save_layout(Layout{}, 10, 0, {}, meta);
  EXPECT_EQ(latest_iteration(dir_), 10);
  EXPECT_EQ(load_layout(Layout{}, std::nullopt, 10), meta);
  // The committed layout on disk.
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "iter_0000010" / "shard_0.safetensors"));
  std::ifstream latest(fs::path(dir_) / "latest");
  std::string line;
  std::getline(latest, line);
  EXPECT_EQ(line, "iter_0000010");
  const json j = read_meta(10);
  EXPECT_EQ(j["format_version"], kFormatVersion);
  EXPECT_EQ(j["iteration"], 10);
  EXPECT_EQ(j["tensors"]["layers.0.proj.weight"]["shape"], json({6, 12}));
  EXPECT_EQ(j["tensors"]["scale"]["shape"], json::array());
  // A checkpoint directory can be loaded directly too.
  std::deque<std::vector<float>> storage;
  LoadRequest req{checkpoint_path(dir_, 10), std::nullopt,
                  rank_pieces(Layout{}, 0, 0, false, 0, storage)};
  EXPECT_EQ(load(req), meta);
  expect_values(req.pieces, 10, "direct");
}

// checkpoint.load / checkpoint.pretrained naming the iteration directory with a trailing slash
// (as shell completion writes it) load that iteration: the index's path has no trailing
// separator, so its parent is the checkpoint directory (it was "iter_N/iter_N" before).
TEST_F(CheckpointTest, AnIterationDirectoryWithATrailingSlashLoads) {
  save_layout(Layout{}, 10);
  const std::string iter_dir = checkpoint_path(dir_, 10);
  const CheckpointIndex index = read_index(iter_dir + "/", std::nullopt);
  EXPECT_EQ(index.path, iter_dir);
  EXPECT_EQ(fs::path(index.path).parent_path(), fs::path(dir_));
  EXPECT_EQ(index.iteration, 10);
}

TEST_F(CheckpointTest, MetadataOnlyCheckpoint) {
  auto comm = parallel::make_single_process_communicator("world");
  SaveRequest req;
  req.dir = dir_;
  req.iteration = 0;
  req.metadata = {{"note", "no tensors"}};
  save(req, *comm, 1);
  EXPECT_EQ(latest_iteration(dir_), 0);
  EXPECT_EQ(load(LoadRequest{dir_, std::nullopt, {}}), req.metadata);
  const CheckpointIndex index = read_index(dir_);
  EXPECT_TRUE(index.files.empty());
  EXPECT_TRUE(index.tensors.empty());
}

TEST_F(CheckpointTest, AnyLayoutLoadsAnyOtherLayout) {
  const std::vector<std::pair<Layout, Layout>> cases = {
      {{1, 1}, {2, 1}},       {{2, 1}, {1, 1}},
      {{2, 1}, {3, 1}},       {{4, 1}, {1, 1}},
      {{1, 1}, {4, 1}},       {{2, 2, true}, {1, 1}},
      {{1, 1}, {2, 3, true}}, {{1, 3, true}, {1, 2, true}},
      {{4, 1}, {2, 2, true}}, {{3, 2, true}, {4, 3, true}},
      {{2, 4, true}, {6, 1}}, {{1, 2, false}, {2, 2, true}},
  };
  int64_t iteration = 0;
  for (const auto& [from, to] : cases) {
    SCOPED_TRACE(from.str() + " -> " + to.str());
    save_layout(from, ++iteration);
    load_layout(to, iteration, iteration);
    if (HasFailure()) break;
  }
}

TEST_F(CheckpointTest, CollectiveSaveOnOneProcess) {
  auto comm = parallel::make_single_process_communicator("world");
  std::deque<std::vector<float>> storage;
  SaveRequest req;
  req.dir = dir_;
  req.iteration = 3;
  req.metadata = {{"step", 3}};
  req.pieces = rank_pieces(Layout{}, 0, 0, true, 3, storage);
  std::vector<std::string> steps;
  req.on_step = [&](const std::string& s) { steps.push_back(s); };
  save(req, *comm, 2);
  EXPECT_EQ(steps, (std::vector<std::string>{"shard_written", "before_metadata", "before_rename",
                                             "before_latest", "before_cleanup", "done"}));
  EXPECT_EQ(latest_iteration(dir_), 3);
  EXPECT_EQ(load_layout(Layout{2, 1}, std::nullopt, 3), json({{"step", 3}}));
  // Leaves nothing but the checkpoint and latest.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000003", "latest"}));
  // A failing rank fails the save everywhere, cleans its temporary and leaves latest alone.
  req.iteration = 4;
  req.pieces[0].local_shape = Shape{1, 1};
  req.on_step = nullptr;
  try {
    save(req, *comm, 2);
    ADD_FAILURE() << "bad piece accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 0"));
    EXPECT_THAT(e.what(), HasSubstr("embedding.weight"));
  }
  EXPECT_EQ(latest_iteration(dir_), 3);
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 4)));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST_F(CheckpointTest, LatestExplicitIterationsAndKeepLast) {
  save_layout(Layout{}, 10);
  save_layout(Layout{2, 1}, 20);
  EXPECT_EQ(latest_iteration(dir_), 20);
  load_layout(Layout{}, std::nullopt, 20);
  load_layout(Layout{}, 10, 10);
  // keep_last 2 keeps the new one and the newest other; the protected one survives.
  save_layout(Layout{}, 30, 2, checkpoint_path(dir_, 10));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 10)));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 20)));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 30)));
  save_layout(Layout{}, 40, 2, checkpoint_path(dir_, 10) + "/");
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 10)));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 20)));
  EXPECT_TRUE(fs::exists(checkpoint_path(dir_, 30)));
  save_layout(Layout{}, 50, 1);
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 10)));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 30)));
  EXPECT_FALSE(fs::exists(checkpoint_path(dir_, 40)));
  EXPECT_EQ(latest_iteration(dir_), 50);
  std::deque<std::vector<float>> storage;
  expect_load_error(whole_model_request(storage, 40), "iter_0000040", "does not exist");
  // Iterations past seven digits still sort and load.
  save_layout(Layout{}, 123456789);
  EXPECT_EQ(latest_iteration(dir_), 123456789);
  load_layout(Layout{1, 2, true}, std::nullopt, 123456789);
}

TEST_F(CheckpointTest, ResavingAnIterationReplacesIt) {
  save_layout(Layout{4, 1}, 5);
  EXPECT_TRUE(fs::exists(fs::path(checkpoint_path(dir_, 5)) / "shard_3.safetensors"));
  save_layout(Layout{1, 2, true}, 5);  // same iteration, two files instead of four
  EXPECT_EQ(latest_iteration(dir_), 5);
  load_layout(Layout{}, std::nullopt, 5);
  EXPECT_FALSE(fs::exists(fs::path(checkpoint_path(dir_, 5)) / "shard_3.safetensors"));
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "latest" || n == "iter_0000005") << n;
  }
  EXPECT_EQ(read_meta(5)["files"].size(), 2u);
}

TEST_F(CheckpointTest, LeftoversAreIgnoredAndCleanedByTheNextSave) {
  save_layout(Layout{}, 10);
  // A crashed save's temporary, a half-deleted old checkpoint, a stray latest temp, an
  // uncommitted directory without metadata, and a checkpoint whose metadata is garbage.
  fs::create_directories(tmp_checkpoint_path(dir_, 20, "dead"));
  std::ofstream(fs::path(tmp_checkpoint_path(dir_, 20, "dead")) / "metadata.json") << "{}";
  fs::create_directories(fs::path(dir_) / "iter_0000005.old-xyz");
  std::ofstream(fs::path(dir_) / "latest.tmp-abc") << "iter_0000020\n";
  fs::create_directories(fs::path(dir_) / "iter_0000030");
  fs::create_directories(fs::path(dir_) / "iter_0000040");
  std::ofstream(fs::path(dir_) / "iter_0000040" / "metadata.json") << "{\"format_version\": 1,";
  EXPECT_EQ(latest_iteration(dir_), 10);
  // latest naming something missing or incomplete falls back to the newest complete one.
  std::ofstream(fs::path(dir_) / "latest", std::ios::trunc) << "iter_0000040\n";
  EXPECT_EQ(latest_iteration(dir_), 10);
  std::ofstream(fs::path(dir_) / "latest", std::ios::trunc) << "garbage";
  EXPECT_EQ(latest_iteration(dir_), 10);
  fs::remove(fs::path(dir_) / "latest");
  EXPECT_EQ(latest_iteration(dir_), 10);
  load_layout(Layout{}, std::nullopt, 10);

  save_layout(Layout{}, 11);
  EXPECT_EQ(latest_iteration(dir_), 11);
  EXPECT_FALSE(fs::exists(tmp_checkpoint_path(dir_, 20, "dead")));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "iter_0000005.old-xyz"));
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "latest.tmp-abc"));
  // Not ours to delete: directories that never were committed checkpoints.
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "iter_0000030"));
  EXPECT_TRUE(fs::exists(fs::path(dir_) / "iter_0000040"));
  EXPECT_EQ(latest_iteration(fs::path(dir_) / "nothing_here"), std::nullopt);
}

TEST_F(CheckpointTest, SeveralPiecesOfOneTensorOnOneRank) {
  // Rank 0 holds segments [0, 5) and [9, 20) of w, rank 1 holds [5, 9) and [20, 24).
  const std::string tmp = tmp_checkpoint_path(dir_, 1, "x");
  std::vector<json> parts;
  std::deque<std::vector<float>> storage;
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges = {{{0, 5}, {9, 20}},
                                                                        {{5, 9}, {20, 24}}};
  SaveRequest req;
  for (int r = 0; r < 2; ++r) {
    req = SaveRequest{};
    req.dir = dir_;
    req.iteration = 1;
    for (auto [b, e] : ranges[r]) {
      TensorPiece p{"w", Shape{4, 6}, Shape{4, 6}, {}, b, e};
      storage.emplace_back();
      for (int64_t i = b; i < e; ++i) storage.back().push_back(value_of("w", i, 1));
      p.data = storage.back().data();
      req.pieces.push_back(p);
    }
    parts.push_back(write_rank_shard(req, tmp, r));
  }
  finalize(req, tmp, parts, 0, {});
  const json j = read_meta(1);
  EXPECT_EQ(j["tensors"]["w"]["pieces"].size(), 4u);
  EXPECT_EQ(j["tensors"]["w"]["pieces"][1]["key"], "w#1");
  EXPECT_EQ(j["tensors"]["w"]["pieces"][1]["flat"], json({9, 20}));
  std::vector<float> out(24, -1);
  TensorPiece whole{"w", Shape{4, 6}, Shape{4, 6}};
  whole.dest = out.data();
  load(LoadRequest{dir_, std::nullopt, {whole}});
  for (int64_t i = 0; i < 24; ++i) ASSERT_EQ(out[i], value_of("w", i, 1));
}

TEST_F(CheckpointTest, RowSplitsReadThroughCoalescedChunks) {
  // A [300, 64] matrix saved whole loads as 4 column shards (300 strided runs each, read in
  // coalesced chunks) and, saved as column shards, loads whole.
  for (int saved_tp : {1, 4}) {
    SCOPED_TRACE(saved_tp);
    fs::remove_all(dir_);
    const Shape shape{300, 64};
    const std::string tmp = tmp_checkpoint_path(dir_, 1, "x");
    std::vector<json> parts;
    std::deque<std::vector<float>> storage;
    SaveRequest req;
    for (int r = 0; r < saved_tp; ++r) {
      req = SaveRequest{};
      req.dir = dir_;
      req.iteration = 1;
      TensorPiece p{"m", shape, Shape{300, 64 / saved_tp},
                    ShardSpec{1, ShardAxis::Tensor, r, saved_tp}};
      const PieceGeometry g = p.geometry();
      storage.emplace_back();
      for (int64_t i = 0; i < g.count(); ++i)
        storage.back().push_back(value_of("m", g.global_index(i), 1));
      p.data = storage.back().data();
      req.pieces.push_back(p);
      parts.push_back(write_rank_shard(req, tmp, r));
    }
    finalize(req, tmp, parts, 0, {});
    for (int tp : {1, 2, 4, 8}) {
      for (int r = 0; r < tp; ++r) {
        TensorPiece p{"m", shape, Shape{300, 64 / tp}, ShardSpec{1, ShardAxis::Tensor, r, tp}};
        std::vector<float> out(static_cast<size_t>(p.geometry().count()), -1);
        p.dest = out.data();
        load(LoadRequest{dir_, std::nullopt, {p}});
        expect_values({p}, 1, concat("tp ", tp, " rank ", r));
      }
    }
  }
}

TEST_F(CheckpointTest, PiecesFromParametersAndOptimizerSegments) {
  // Save from a tp=2 ParamStore (both shards) plus Adam-like segments; load into tp=1.
  const std::string tmp = tmp_checkpoint_path(dir_, 7, "x");
  std::vector<json> parts;
  std::vector<std::unique_ptr<ParamStore>> stores;
  std::vector<std::vector<float>> moments;
  SaveRequest req;
  for (int t = 0; t < 2; ++t) {
    auto store = std::make_unique<ParamStore>();
    store->add("fc.weight", {8, 6}, {}, true, ShardSpec{0, ShardAxis::Tensor, t, 2});
    store->add("norm.weight", {6}, {ParamInit::Kind::Ones}, false);
    store->finalize();
    store->initialize(42);
    Parameter& w = store->get("fc.weight");
    moments.emplace_back(static_cast<size_t>(w.weight.numel()));
    for (size_t i = 0; i < moments.back().size(); ++i)
      moments.back()[i] = value_of("m", w.global_index(static_cast<int64_t>(i)), 0);
    req = SaveRequest{};
    req.dir = dir_;
    req.iteration = 7;
    req.write_this_rank_replicas = t == 0;
    for (Parameter* p : store->params())
      req.pieces.push_back(param_piece(*p, "model.", p->weight.data<float>()));
    // Two segments of the local shard, at their own offsets in the moment buffer.
    req.pieces.push_back(segment_piece(segment(&w, 0, 10, 0), "m.", moments.back().data()));
    req.pieces.push_back(segment_piece(segment(&w, 10, 24, 10), "m.", moments.back().data() + 10));
    parts.push_back(write_rank_shard(req, tmp, t));
    stores.push_back(std::move(store));
  }
  finalize(req, tmp, parts, 0, {});

  ParamStore full;
  full.add("fc.weight", {8, 6}, {}, true);
  full.add("norm.weight", {6}, {ParamInit::Kind::Zeros}, false);
  full.finalize();
  std::vector<float> m(48, -1);
  std::vector<TensorPiece> pieces;
  for (Parameter* p : full.params())
    pieces.push_back(param_piece(*p, "model.", p->weight.data<float>()));
  pieces.push_back(segment_piece(segment(&full.get("fc.weight"), 0, 48, 0), "m.", m.data()));
  load(LoadRequest{dir_, std::nullopt, pieces});
  ParamStore reference;
  reference.add("fc.weight", {8, 6}, {}, true);
  reference.add("norm.weight", {6}, {ParamInit::Kind::Ones}, false);
  reference.finalize();
  reference.initialize(42);
  for (int64_t i = 0; i < 48; ++i) {
    ASSERT_EQ(full.get("fc.weight").weight.data<float>()[i],
              reference.get("fc.weight").weight.data<float>()[i]);
    ASSERT_EQ(m[i], value_of("m", i, 0));
  }
  for (int64_t i = 0; i < 6; ++i) ASSERT_EQ(full.get("norm.weight").weight.data<float>()[i], 1.0f);
}

}  // namespace
}  // namespace megatron::checkpoint
