// Sharded save/load with simulated ranks (write_rank_shard per rank + finalize, as the
// collective save does): every TP/DP layout, with and without distributed-optimizer flat
// segments, loads every other layout's checkpoint; latest/keep_last/protect; leftovers; and
// every kind of damaged or mismatched checkpoint gives an InputError naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/training/checkpoint_pieces.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using training::param_piece;
using training::segment_piece;
using json = nlohmann::json;
using ::testing::HasSubstr;

struct TensorDef {
  std::string name;
  Shape shape;
  int tp_dim;  // -1: replicated over tensor parallel
};
const std::vector<TensorDef> kModel = {
    {"embedding.weight", {12, 4}, 0},
    {"layers.0.qkv.weight", {12, 6}, 0},
    {"layers.0.qkv.bias", {12}, 0},
    {"layers.0.proj.weight", {6, 12}, 1},
    {"layers.0.norm.weight", {6}, -1},
    {"layers.0.w3d", {4, 12, 3}, 1},
    {"scale", {}, -1},
};
const char* kMoment = "optimizer.exp_avg.";

// Exactly representable, distinct per tensor, element and iteration.
float value_of(const std::string& name, int64_t global, int64_t iteration) {
  return static_cast<float>(static_cast<int64_t>(name_hash(name) % 997) * 4096 + global +
                            iteration * 7);
}

struct Layout {
  int tp = 1, dp = 1;
  bool distributed = false;  // optimizer state as dp flat segments
  std::string str() const { return concat("tp", tp, "_dp", dp, distributed ? "_distopt" : ""); }
};

// The pieces simulated rank (t, d) saves (params only on d == 0, moments as its dp segment) or
// loads (params on every d). Buffers live in `storage`.
std::vector<TensorPiece> rank_pieces(const Layout& L, int t, int d, bool for_save,
                                     int64_t iteration, std::deque<std::vector<float>>& storage) {
  std::vector<TensorPiece> out;
  auto add = [&](TensorPiece p) {
    const PieceGeometry g = p.geometry();
    storage.emplace_back(static_cast<size_t>(g.count()), std::nanf(""));
    auto& buf = storage.back();
    if (for_save)
      for (int64_t i = 0; i < g.count(); ++i)
        buf[i] = value_of(p.name, g.global_index(i), iteration);
    p.data = p.dest = buf.data();
    out.push_back(std::move(p));
  };
  std::vector<TensorPiece> locals;
  for (const TensorDef& def : kModel) {
    TensorPiece p;
    p.name = def.name;
    p.global_shape = p.local_shape = def.shape;
    if (def.tp_dim >= 0 && L.tp > 1) {
      p.local_shape[def.tp_dim] /= L.tp;
      p.shard = ShardSpec{def.tp_dim, ShardAxis::Tensor, t, L.tp};
    }
    locals.push_back(p);
    if (!for_save || d == 0) add(p);
  }
  // Moments: the local shards concatenated, padded to a multiple of dp, cut into dp ranges.
  int64_t total = 0;
  for (const auto& p : locals) total += p.local_shape.numel();
  const int64_t per = (total + L.dp - 1) / L.dp;
  const int64_t lo = L.distributed ? d * per : 0;
  const int64_t hi = L.distributed ? (d + 1) * per : (for_save && d != 0 ? 0 : total);
  int64_t off = 0;
  for (TensorPiece p : locals) {
    const int64_t n = p.local_shape.numel();
    const int64_t b = std::max(lo, off), e = std::min(hi, off + n);
    if (b < e || (n == 0 && lo <= off && off < hi)) {
      p.name = kMoment + p.name;
      p.flat_begin = b - off;
      p.flat_end = e - off;
      add(p);
    }
    off += n;
  }
  return out;
}

void expect_values(const std::vector<TensorPiece>& pieces, int64_t iteration,
                   const std::string& where) {
  for (const TensorPiece& p : pieces) {
    const PieceGeometry g = p.geometry();
    for (int64_t i = 0; i < g.count(); ++i)
      ASSERT_EQ(p.dest[i], value_of(p.name, g.global_index(i), iteration))
          << where << ": " << p.name << " element " << i << " (global " << g.global_index(i) << ")";
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            concat("mt_ckpt_", ::getpid(), "_",
                   ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Saves like the collective save would with tp x dp ranks.
  void save_layout(const Layout& L, int64_t iteration, int keep_last = 0,
                   const std::string& protect = {}, json metadata = json::object()) {
    const std::string tmp = tmp_checkpoint_path(dir_, iteration, concat("sim", ++saves_));
    std::vector<json> parts;
    SaveRequest first;
    for (int r = 0; r < L.tp * L.dp; ++r) {
      const int t = r % L.tp, d = r / L.tp;
      std::deque<std::vector<float>> storage;
      SaveRequest req;
      req.dir = dir_;
      req.iteration = iteration;
      req.metadata = metadata;
      req.pieces = rank_pieces(L, t, d, true, iteration, storage);
      req.write_this_rank_replicas = (t == 0);
      parts.push_back(write_rank_shard(req, tmp, r));
      if (r == 0) first = req;
    }
    first.pieces.clear();
    finalize(first, tmp, parts, keep_last, protect);
  }

  // Loads every simulated rank of L and checks each element.
  json load_layout(const Layout& L, std::optional<int64_t> iteration, int64_t expect_iteration) {
    json meta;
    for (int r = 0; r < L.tp * L.dp; ++r) {
      std::deque<std::vector<float>> storage;
      LoadRequest req{dir_, iteration, rank_pieces(L, r % L.tp, r / L.tp, false, 0, storage)};
      meta = load(req);
      expect_values(req.pieces, expect_iteration, concat(L.str(), " rank ", r));
    }
    return meta;
  }

  std::string meta_path(int64_t iteration) const {
    return (fs::path(checkpoint_path(dir_, iteration)) / "metadata.json").string();
  }
  json read_meta(int64_t iteration) const {
    std::ifstream f(meta_path(iteration));
    return json::parse(f);
  }
  void write_meta(int64_t iteration, const json& j) const {
    std::ofstream f(meta_path(iteration), std::ios::trunc);
    f << j.dump(1);
  }
  // load() must throw an InputError containing every one of `parts`.
  template <typename... Parts>
  void expect_load_error(const LoadRequest& req, const Parts&... parts) {
    try {
      load(req);
      ADD_FAILURE() << "load succeeded";
    } catch (const InputError& e) {
      for (const std::string& part : {std::string(parts)...})
        EXPECT_THAT(e.what(), HasSubstr(part));
    }
  }
  LoadRequest whole_model_request(std::deque<std::vector<float>>& storage,
                                  std::optional<int64_t> iteration = {}) {
    return LoadRequest{dir_, iteration, rank_pieces(Layout{}, 0, 0, false, 0, storage)};
  }

  std::string dir_;
  int saves_ = 0;
};

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
    req.pieces.push_back(segment_piece(optim::Segment{&w, 0, 10, 0}, "m.", moments.back().data()));
    req.pieces.push_back(
        segment_piece(optim::Segment{&w, 10, 24, 10}, "m.", moments.back().data() + 10));
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
  pieces.push_back(segment_piece(optim::Segment{&full.get("fc.weight"), 0, 48, 0}, "m.", m.data()));
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

TEST_F(CheckpointTest, FinalizeRefusesDoublesAndGaps) {
  // Both tp ranks writing the replicated pieces covers them twice; rank 1's part missing leaves
  // half of every sharded tensor unheld. (A tensor no rank writes is simply not saved.)
  for (bool doubles : {true, false}) {
    SCOPED_TRACE(doubles);
    const std::string tmp = tmp_checkpoint_path(dir_, 1, doubles ? "a" : "b");
    std::vector<json> parts;
    std::deque<std::vector<float>> storage;
    SaveRequest req;
    const Layout L{2, 1};
    for (int t = 0; t < 2; ++t) {
      req = SaveRequest{};
      req.dir = dir_;
      req.iteration = 1;
      req.pieces = rank_pieces(L, t, 0, true, 1, storage);
      req.write_this_rank_replicas = doubles || t == 0;
      json part = write_rank_shard(req, tmp, t);
      if (doubles || t == 0) parts.push_back(part);
    }
    try {
      finalize(req, tmp, parts, 0, {});
      ADD_FAILURE() << "finalize accepted";
    } catch (const Error& e) {
      if (doubles) {
        EXPECT_THAT(e.what(), HasSubstr("layers.0.norm.weight"));
        EXPECT_THAT(e.what(), HasSubstr("more than one piece"));
      } else {
        EXPECT_THAT(e.what(), HasSubstr("embedding.weight"));
        EXPECT_THAT(e.what(), HasSubstr("held by no piece"));
      }
    }
    EXPECT_EQ(latest_iteration(dir_), std::nullopt);
  }
}

TEST_F(CheckpointTest, MismatchedRequestsNameTheTensorAndFile) {
  std::deque<std::vector<float>> storage;
  expect_load_error(whole_model_request(storage), dir_, "does not exist");
  fs::create_directories(dir_);
  expect_load_error(whole_model_request(storage), "no complete checkpoint in " + dir_);
  save_layout(Layout{2, 1}, 1);
  const std::string meta = meta_path(1);
  std::vector<float> buf(100);
  TensorPiece missing{"layers.9.weight", Shape{2}, Shape{2}};
  missing.dest = buf.data();
  expect_load_error(LoadRequest{dir_, {}, {missing}}, "no tensor 'layers.9.weight'", meta);
  TensorPiece wrong{"layers.0.qkv.weight", Shape{12, 7}, Shape{12, 7}};
  wrong.dest = buf.data();
  expect_load_error(LoadRequest{dir_, {}, {wrong}}, "'layers.0.qkv.weight'", "[12,6]", "[12,7]",
                    meta);
  TensorPiece no_dest{"layers.0.qkv.bias", Shape{12}, Shape{12}};
  EXPECT_THROW(load(LoadRequest{dir_, {}, {no_dest}}), Error);
}

TEST_F(CheckpointTest, DamagedFilesAreInputErrorsNamingTheFile) {
  std::deque<std::vector<float>> storage;
  const std::string shard1 = (fs::path(checkpoint_path(dir_, 1)) / "shard_1.safetensors").string();
  auto fresh = [&] {
    fs::remove_all(dir_);
    save_layout(Layout{2, 1}, 1);
  };
  // Truncated shard.
  fresh();
  fs::resize_file(shard1, fs::file_size(shard1) / 2);
  expect_load_error(whole_model_request(storage), shard1, "truncated?");
  // Truncated by a few bytes only (header intact).
  fresh();
  fs::resize_file(shard1, fs::file_size(shard1) - 3);
  expect_load_error(whole_model_request(storage), shard1, "truncated?");
  // Truncated, and metadata.json edited to match: the safetensors check still catches it.
  fresh();
  fs::resize_file(shard1, fs::file_size(shard1) - 3);
  json edited = read_meta(1);
  edited["files"]["shard_1.safetensors"]["bytes"] = fs::file_size(shard1);
  write_meta(1, edited);
  expect_load_error(whole_model_request(storage), shard1, "reach past the data buffer");
  // Deleted shard.
  fresh();
  fs::remove(shard1);
  expect_load_error(whole_model_request(storage), shard1, "missing");
  // Corrupt header.
  fresh();
  {
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);
    f.write("\x01\x02", 2);
  }
  expect_load_error(whole_model_request(storage), shard1);
  // Bad metadata.json: invalid JSON (explicit iteration), a newer format, wrong iteration.
  fresh();
  std::ofstream(meta_path(1), std::ios::trunc) << "{\"format_version\": ";
  expect_load_error(whole_model_request(storage, 1), meta_path(1), "invalid JSON");
  fresh();
  json j = read_meta(1);
  j["format_version"] = 99;
  write_meta(1, j);
  expect_load_error(whole_model_request(storage, 1), meta_path(1), "format_version 99");
  fresh();
  j = read_meta(1);
  j["iteration"] = 2;
  write_meta(1, j);
  expect_load_error(whole_model_request(storage, 1), meta_path(1), "iteration 2");
  // The index disagrees with the files: recorded size, key, dtype, byte range, geometry.
  fresh();
  j = read_meta(1);
  j["files"]["shard_1.safetensors"]["bytes"] = 12;
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), shard1, "records 12");
  fresh();
  j = read_meta(1);
  j["tensors"]["layers.0.qkv.bias"]["pieces"][1]["key"] = "nope";
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), shard1, "'nope'", "missing");
  fresh();
  j = read_meta(1);
  j["tensors"]["layers.0.qkv.bias"]["dtype"] = "I32";
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), "layers.0.qkv.bias", "I32");
  fresh();
  j = read_meta(1);
  j["tensors"]["layers.0.qkv.bias"]["pieces"][1]["data_offsets"] = {4, 28};
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), shard1, "layers.0.qkv.bias", "[4, 28)");
  fresh();
  j = read_meta(1);
  j["tensors"]["layers.0.qkv.bias"]["pieces"][1]["offset"] = {7};
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), meta_path(1), "layers.0.qkv.bias", "outside");
  fresh();
  j = read_meta(1);
  j["tensors"]["layers.0.qkv.bias"]["pieces"][1]["file"] = "../../etc/passwd";
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), meta_path(1), "not listed");
  fresh();
  j = read_meta(1);
  j["files"]["../x"] = {{"bytes", 1}};
  write_meta(1, j);
  expect_load_error(whole_model_request(storage), meta_path(1), "not a plain file name");
}

TEST_F(CheckpointTest, ElementsCoveredTwiceOrNotAtAllAreErrors) {
  // w [4, 4] saved as two row shards (one per file). Dropping shard 1 from the index leaves a
  // gap; grafting a second copy of shard 0 in covers elements twice.
  auto save_w = [&] {
    fs::remove_all(dir_);
    const std::string tmp = tmp_checkpoint_path(dir_, 1, "x");
    std::vector<json> parts;
    std::vector<float> data(8, 1.0f);
    SaveRequest req;
    for (int t = 0; t < 2; ++t) {
      req = SaveRequest{};
      req.dir = dir_;
      req.iteration = 1;
      TensorPiece p{"w", Shape{4, 4}, Shape{2, 4}, ShardSpec{0, ShardAxis::Tensor, t, 2}};
      p.data = data.data();
      req.pieces = {p};
      parts.push_back(write_rank_shard(req, tmp, t));
    }
    finalize(req, tmp, parts, 0, {});
  };
  std::vector<float> out(16);
  TensorPiece whole{"w", Shape{4, 4}, Shape{4, 4}};
  whole.dest = out.data();
  save_w();
  json j = read_meta(1);
  j["tensors"]["w"]["pieces"].erase(1);
  j["files"].erase("shard_1.safetensors");
  write_meta(1, j);
  expect_load_error(LoadRequest{dir_, {}, {whole}}, "'w'", "[8, 16) are in no saved piece");
  // Rows 0-1 alone are still loadable from what is left.
  TensorPiece top{"w", Shape{4, 4}, Shape{2, 4}, ShardSpec{0, ShardAxis::Tensor, 0, 2}};
  top.dest = out.data();
  EXPECT_NO_THROW(load(LoadRequest{dir_, {}, {top}}));

  save_w();
  const fs::path ck = checkpoint_path(dir_, 1);
  fs::copy_file(ck / "shard_0.safetensors", ck / "shard_9.safetensors");
  j = read_meta(1);
  json extra = j["tensors"]["w"]["pieces"][0];
  extra["file"] = "shard_9.safetensors";
  j["tensors"]["w"]["pieces"].push_back(extra);
  j["files"]["shard_9.safetensors"] = j["files"]["shard_0.safetensors"];
  write_meta(1, j);
  expect_load_error(LoadRequest{dir_, {}, {whole}}, "'w'", "saved more than once");
}

}  // namespace
}  // namespace megatron::checkpoint
