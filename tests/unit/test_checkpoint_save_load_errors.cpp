// Sharded checkpoints that are wrong: finalize refuses pieces covering a tensor twice or not at
// all; loading a missing, mismatched, truncated, corrupt or inconsistently indexed checkpoint, or
// one whose elements are saved twice or not at all, gives an InputError naming the tensor and the
// file. Saved with simulated ranks as in test_checkpoint_save_load.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "tests/support/checkpoint_test_util.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::CheckpointTest;
using testing::Layout;
using testing::rank_pieces;
using json = nlohmann::json;
using ::testing::HasSubstr;

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

// A checkpoint saved with NaN or inf in a tensor (from a diverged run; its checksums are right)
// is refused at load naming the tensor and the count: it would train or decode garbage.
TEST_F(CheckpointTest, NonFiniteValuesAreRefusedNamingTheTensor) {
  const std::string tmp = tmp_checkpoint_path(dir_, 3, "nan");
  std::deque<std::vector<float>> storage;
  SaveRequest req;
  req.dir = dir_;
  req.iteration = 3;
  req.pieces = rank_pieces(Layout{}, 0, 0, true, 3, storage);
  req.write_this_rank_replicas = true;
  int poisoned = 0;
  for (TensorPiece& p : req.pieces)
    if (p.name == "layers.0.proj.weight") {
      p.dest[1] = std::nanf("");
      p.dest[4] = std::numeric_limits<float>::infinity();
      ++poisoned;
    }
  ASSERT_EQ(poisoned, 1);
  const std::vector<nlohmann::json> parts = {write_rank_shard(req, tmp, 0)};
  req.pieces.clear();
  finalize(req, tmp, parts, 0, {});
  std::deque<std::vector<float>> into;
  expect_load_error(whole_model_request(into), "'layers.0.proj.weight'",
                    "holds 2 non-finite values (NaN or inf)");
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
  // Truncated, and metadata.json edited to match (size, and no checksum as in a checkpoint from
  // before checksums): the safetensors check still catches it.
  fresh();
  fs::resize_file(shard1, fs::file_size(shard1) - 3);
  json edited = read_meta(1);
  edited["files"]["shard_1.safetensors"]["bytes"] = fs::file_size(shard1);
  edited["files"]["shard_1.safetensors"].erase("crc32c");
  write_meta(1, edited);
  expect_load_error(whole_model_request(storage), shard1, "reach past the data buffer");
  // Tensor bytes overwritten in place (the second half inverted, size and header unchanged): the
  // recorded CRC-32C refuses the file, naming it.
  fresh();
  {
    const auto size = static_cast<std::streamoff>(fs::file_size(shard1));
    std::fstream f(shard1, std::ios::in | std::ios::out | std::ios::binary);
    std::vector<char> bytes(static_cast<size_t>(size - size / 2));
    f.seekg(size / 2);
    f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    for (char& b : bytes) b = static_cast<char>(~b);
    f.seekp(size / 2);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  expect_load_error(whole_model_request(storage), shard1, "CRC-32C");
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
