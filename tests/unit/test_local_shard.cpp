// The local checkpoint shard format (megatron/checkpoint/local_shard.h): a round trip keeps every
// byte and the run state; a file written by an independent encoder (the fuzz seed, made in
// Python) parses; truncation, a wrong magic, an oversized header, a flipped payload byte and
// inconsistent header fields are refused naming the file (and the tensor).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "megatron/checkpoint/local_shard.h"
#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron {
namespace {

using checkpoint::LocalShardHeader;

std::vector<uint8_t> sample(std::vector<float>* weights = nullptr) {
  static std::vector<float> w = {1.5f, -2.0f, 3.25f};
  static std::vector<uint16_t> m = {7, 8};
  if (weights) *weights = w;
  LocalShardHeader h;
  h.owner = 1;
  h.world = 4;
  h.iteration = 12;
  h.fingerprint = "abc";
  h.state = {{"sample_offset", 5}, {"optimizer_steps", 12}};
  h.tensors = {{"weights", DType::F32}, {"exp_avg", DType::BF16}};
  return checkpoint::encode_local_shard(
      h, {{reinterpret_cast<const uint8_t*>(w.data()), w.size() * 4},
          {reinterpret_cast<const uint8_t*>(m.data()), m.size() * 2}});
}

std::string refusal(const std::vector<uint8_t>& file) {
  try {
    checkpoint::parse_local_shard(file, "x.mtl", nullptr);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(LocalShard, RoundTripKeepsEveryByteAndTheState) {
  std::vector<float> w;
  const std::vector<uint8_t> file = sample(&w);
  std::vector<std::span<const uint8_t>> payload;
  const LocalShardHeader h = checkpoint::parse_local_shard(file, "x.mtl", &payload);
  EXPECT_EQ(h.owner, 1);
  EXPECT_EQ(h.world, 4);
  EXPECT_EQ(h.iteration, 12);
  EXPECT_EQ(h.fingerprint, "abc");
  EXPECT_EQ(h.state["sample_offset"], 5);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].numel, 3);
  EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
  ASSERT_EQ(payload[0].size(), 12u);
  EXPECT_EQ(std::memcmp(payload[0].data(), w.data(), 12), 0);
  // The header alone, from a prefix, with the file size it implies.
  const int64_t header_end = checkpoint::local_shard_payload_offset(file);
  const std::span<const uint8_t> prefix(file.data(), static_cast<size_t>(header_end));
  EXPECT_EQ(checkpoint::parse_local_shard_header(prefix, "x.mtl", file.size()).iteration, 12);
  EXPECT_THROW(checkpoint::parse_local_shard_header(prefix, "x.mtl", file.size() - 1), InputError);
}

TEST(LocalShard, AFileOfAnotherEncoderParses) {
  const std::filesystem::path seed =
      std::filesystem::path(MEGATRON_SOURCE_DIR) / "tests/fuzz/corpus/fuzz_local_shard/two_tensors.mtl";
  std::ifstream in(seed, std::ios::binary);
  ASSERT_TRUE(in) << seed;
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  std::vector<std::span<const uint8_t>> payload;
  const LocalShardHeader h = checkpoint::parse_local_shard(file, seed.string(), &payload);
  ASSERT_EQ(h.tensors.size(), 2u);
  float w[4];
  std::memcpy(w, payload[0].data(), 16);
  EXPECT_EQ(w[3], 4.0f);
  EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
}

TEST(LocalShard, DamageIsRefusedNamingTheFile) {
  const std::vector<uint8_t> good = sample();
  std::vector<uint8_t> f = good;
  f.pop_back();
  EXPECT_NE(refusal(f).find("x.mtl: local checkpoint is"), std::string::npos) << refusal(f);
  f = good;
  f[0] = 'X';
  EXPECT_NE(refusal(f).find("no MTLOCAL1 magic"), std::string::npos);
  f = good;
  f[15] = 0x7f;  // a header length of petabytes
  EXPECT_NE(refusal(f).find("truncated or too large"), std::string::npos) << refusal(f);
  f = good;
  f.back() ^= 1;
  EXPECT_NE(refusal(f).find("tensor 'exp_avg' fails its CRC-32C"), std::string::npos) << refusal(f);
  f.assign(good.begin(), good.begin() + 10);
  EXPECT_NE(refusal(f).find("x.mtl"), std::string::npos);
}

TEST(LocalShard, InconsistentHeaderFieldsAreRefused) {
  const std::vector<uint8_t> good = sample();
  const int64_t at = checkpoint::local_shard_payload_offset(good);
  const std::string header(good.begin() + 16, good.begin() + at);
  auto with_header = [&](std::string h) {
    std::vector<uint8_t> f(good.begin(), good.begin() + 16);
    for (int i = 0; i < 8; ++i) f[8 + i] = static_cast<uint8_t>(uint64_t{h.size()} >> (8 * i));
    f.insert(f.end(), h.begin(), h.end());
    f.insert(f.end(), good.begin() + at, good.end());
    return refusal(f);
  };
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string h = header;
    const size_t p = h.find(from);
    EXPECT_NE(p, std::string::npos) << from;
    return h.replace(p, from.size(), to);
  };
  EXPECT_NE(with_header(replace("\"owner\":1", "\"owner\":4")).find("out of range"),
            std::string::npos);
  EXPECT_NE(with_header(replace("\"dtype\":\"bf16\"", "\"dtype\":\"fp99\"")).find("unknown dtype 'fp99'"),
            std::string::npos);
  EXPECT_NE(with_header(replace("\"numel\":3", "\"numel\":-3")).find("out of range"),
            std::string::npos);
  EXPECT_NE(with_header(replace("\"numel\":3", "\"numel\":4")).find("truncated or overwritten"),
            std::string::npos);
  EXPECT_NE(with_header(replace("\"iteration\":12", "\"iteration\":\"12\"")).find("'iteration'"),
            std::string::npos);
  EXPECT_NE(with_header("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(with_header("{\"owner\":").find("not a JSON object"), std::string::npos);
}

}  // namespace
}  // namespace megatron
