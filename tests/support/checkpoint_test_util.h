#pragma once
// Helpers shared by the sharded checkpoint tests (tests/unit/test_checkpoint_save_load*.cpp): a
// small model whose tensors are sharded over tensor parallelism, exactly representable values
// per tensor, element and iteration, the pieces a simulated (tp, dp) rank saves or loads, and a
// fixture that saves and loads like the collective save would with tp x dp ranks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"

namespace megatron::checkpoint::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

struct TensorDef {
  std::string name;
  Shape shape;
  int tp_dim;  // -1: replicated over tensor parallel
};
inline const std::vector<TensorDef> kModel = {
    {"embedding.weight", {12, 4}, 0},
    {"layers.0.qkv.weight", {12, 6}, 0},
    {"layers.0.qkv.bias", {12}, 0},
    {"layers.0.proj.weight", {6, 12}, 1},
    {"layers.0.norm.weight", {6}, -1},
    {"layers.0.w3d", {4, 12, 3}, 1},
    {"scale", {}, -1},
};
inline constexpr const char* kMoment = "optimizer.exp_avg.";

// Exactly representable, distinct per tensor, element and iteration.
inline float value_of(const std::string& name, int64_t global, int64_t iteration) {
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
inline std::vector<TensorPiece> rank_pieces(const Layout& L, int t, int d, bool for_save,
                                            int64_t iteration,
                                            std::deque<std::vector<float>>& storage) {
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

inline void expect_values(const std::vector<TensorPiece>& pieces, int64_t iteration,
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

}  // namespace megatron::checkpoint::testing
