// The restricted unpickler (megatron/checkpoint/pickle.h) on pickles made by Python, torch.save
// and torch.distributed.checkpoint (tests/fixtures/pickle, tools/gen_pickle_fixtures.py): plain
// data in protocols 2, 4 and 5 reads as written; torch's tensor rebuilds and storage ids read as
// data; a checkpoint whose pickle calls os.system is refused naming it, and nothing runs;
// truncation, cycles, deep nesting, unknown opcodes and missing memo keys are refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle.h"
#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;
using Kind = PickleValue::Kind;
using namespace std::string_literals;

std::vector<uint8_t> fixture(const std::string& name) {
  const fs::path p = fs::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/pickle" / name;
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string refusal(const std::vector<uint8_t>& bytes) {
  try {
    read_pickle(bytes, "x.pkl");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::vector<int64_t> ints(const PickleValue& list) {
  std::vector<int64_t> out;
  for (const auto& v : list.items) out.push_back(v->integer);
  return out;
}

TEST(Pickle, PlainDataReadsAsPythonWroteIt) {
  for (const char* name : {"plain_p2.pkl", "plain_p4.pkl", "plain_p5.pkl"}) {
    SCOPED_TRACE(name);
    const PickleRef root = read_pickle(fixture(name), name);
    ASSERT_TRUE(root->is(Kind::Dict));
    const std::vector<int64_t> want = {0,         1,         -1,           255,
                                       256,       65535,     65536,        -(1LL << 31),
                                       1LL << 31, 1LL << 40, -(1LL << 40), INT64_MAX};
    EXPECT_EQ(ints(*root->get("ints")), want);
    const auto& floats = root->get("floats")->items;
    ASSERT_EQ(floats.size(), 5u);
    EXPECT_EQ(floats[2]->real, -2.25);
    EXPECT_EQ(floats[4]->real, 3.4e38);
    EXPECT_EQ(root->get("text")->text, "Grüße, 世界");
    EXPECT_EQ(root->get("bytes")->kind, Kind::Bytes);
    EXPECT_EQ(root->get("bytes")->text, std::string("\x00\x01\xff", 3));
    const PickleValue& t = *root->get("tuple");
    ASSERT_TRUE(t.is(Kind::Tuple));
    EXPECT_EQ(t.items[1]->text, "two");
    EXPECT_TRUE(t.items[2]->is(Kind::None));
    EXPECT_TRUE(root->get("flags")->items[0]->boolean);
    EXPECT_FALSE(root->get("flags")->items[1]->boolean);
    EXPECT_EQ(root->get("nested")->get("a")->items[1]->items[1]->items[0]->integer, 3);
    EXPECT_TRUE(root->get("nested")->get("b")->get("c")->is(Kind::None));
    EXPECT_EQ(root->get("set")->kind, Kind::Set);
    EXPECT_EQ(root->get("set")->items.size(), 2u);
    const PickleValue& ordered = *root->get("ordered");
    ASSERT_TRUE(ordered.is(Kind::Dict));
    EXPECT_EQ(ordered.dict[0].first->text, "z");  // insertion order kept
    const PickleValue& args = *root->get("args");
    ASSERT_TRUE(args.is(Kind::Object));
    EXPECT_EQ(args.text, "argparse.Namespace");
    ASSERT_TRUE(args.state);
    EXPECT_EQ(args.state->get("hidden_size")->integer, 64);
    EXPECT_EQ(args.state->get("lr")->real, 3e-4);
    EXPECT_EQ(args.state->get("name")->text, "gpt");
  }
}

TEST(Pickle, TorchSaveTensorsReadAsRebuildsOfStorages) {
  const PickleRef root = read_pickle(fixture("torch_state.data.pkl"), "torch_state.data.pkl");
  EXPECT_EQ(root->get("iteration")->integer, 7);
  EXPECT_EQ(root->get("args")->state->get("num_layers")->integer, 2);
  const PickleValue& model = *root->get("model");
  ASSERT_TRUE(model.is(Kind::Dict));
  ASSERT_EQ(model.dict.size(), 4u);
  const PickleValue& w = *model.get("w");
  ASSERT_TRUE(w.is(Kind::Object));
  EXPECT_EQ(w.text, "torch._utils._rebuild_tensor_v2");
  const auto& a = w.items[0]->items;  // (storage, offset, size, stride, requires_grad, hooks)
  ASSERT_GE(a.size(), 5u);
  ASSERT_TRUE(a[0]->is(Kind::Persistent));
  const auto& id = a[0]->items[0]->items;  // ('storage', torch.FloatStorage, '0', 'cpu', 6)
  EXPECT_EQ(id[0]->text, "storage");
  EXPECT_EQ(id[1]->text, "torch.FloatStorage");
  EXPECT_EQ(id[2]->text, "0");
  EXPECT_EQ(id[4]->integer, 6);
  EXPECT_EQ(ints(*a[2]), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ints(*a[3]), (std::vector<int64_t>{3, 1}));
  const auto& v = model.get("v")->items[0]->items;  // w[1]: the same storage at offset 3
  EXPECT_EQ(v[0]->items[0]->items[2]->text, "0");
  EXPECT_EQ(v[1]->integer, 3);
  EXPECT_EQ(model.get("b")->items[0]->items[0]->items[0]->items[1]->text, "torch.BFloat16Storage");
}

TEST(Pickle, DistributedCheckpointMetadataReads) {
  const PickleRef root = read_pickle(fixture("dcp/.metadata"), ".metadata");
  ASSERT_TRUE(root->is(Kind::Object));
  EXPECT_EQ(root->text, "torch.distributed.checkpoint.metadata.Metadata");
  ASSERT_TRUE(root->state);
  const PickleValue* entries = root->state->get("state_dict_metadata");
  ASSERT_NE(entries, nullptr);
  const PickleValue& w = *entries->get("w");  // a 4-element fp32 tensor, one chunk
  EXPECT_EQ(w.text, "torch.distributed.checkpoint.metadata.TensorStorageMetadata");
  const PickleValue& size = *w.state->get("size");
  EXPECT_EQ(size.text, "torch.Size");
  EXPECT_EQ(ints(*size.items[0]->items[0]), (std::vector<int64_t>{4}));
  const PickleValue& chunks = *w.state->get("chunks");
  ASSERT_EQ(chunks.items.size(), 1u);
  EXPECT_EQ(chunks.items[0]->text, "torch.distributed.checkpoint.metadata.ChunkStorageMetadata");
  EXPECT_EQ(entries->get("step")->text,
            "torch.distributed.checkpoint.metadata.BytesStorageMetadata");
}

TEST(Pickle, ACheckpointCallingOsSystemIsRefusedAndNothingRuns) {
  fs::remove("/tmp/megatron_pickle_pwned");
  const std::string e = refusal(fixture("malicious.data.pkl"));
  EXPECT_NE(e.find("x.pkl: pickle byte"), std::string::npos) << e;
  EXPECT_NE(e.find("refers to posix.system, which a checkpoint has no use for: refused"),
            std::string::npos)
      << e;
  EXPECT_FALSE(fs::exists("/tmp/megatron_pickle_pwned"));
  EXPECT_FALSE(pickle_global_allowed("builtins", "eval"));
  EXPECT_FALSE(pickle_global_allowed("subprocess", "Popen"));
  EXPECT_TRUE(pickle_global_allowed("torch._utils", "_rebuild_tensor_v2"));
}

TEST(Pickle, DamageAndHostileShapesAreRefused) {
  const std::vector<uint8_t> good = fixture("plain_p4.pkl");
  for (size_t n = 0; n < good.size(); ++n) {  // every truncation
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(refusal(cut), "") << n << " bytes";
  }
  // Protocol 0's text opcodes beyond numbers (UNICODE) are not needed by any checkpoint.
  EXPECT_NE(refusal(fixture("plain_p0.pkl")).find("opcode 0x56"), std::string::npos);
  auto bytes = [](const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); };
  // A list put inside itself (EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, STOP).
  EXPECT_NE(refusal(bytes("\x80\x02]q\x00h\x00"
                          "a."s))
                .find("a value put inside itself"),
            std::string::npos);
  // A list already inside another one changed afterwards.
  EXPECT_NE(refusal(bytes("\x80\x02]q\x00]h\x00"
                          "ah\x00K\x01"
                          "a0."s))
                .find("already inside"),
            std::string::npos);
  std::string deep = "\x80\x02";
  for (int i = 0; i < 300; ++i) deep += "]";
  for (int i = 0; i < 299; ++i) deep += "a";
  deep += ".";
  EXPECT_NE(refusal(bytes(deep)).find("nested deeper than 200"), std::string::npos);
  EXPECT_NE(refusal(bytes("\x80\x02h\x07.")).find("memo key 7 was never stored"),
            std::string::npos);
  EXPECT_NE(refusal(bytes("\x80\x02K\x01K\x02.")).find("STOP with a malformed stack"),
            std::string::npos);
  EXPECT_NE(refusal(bytes("\x80\x02\x8a\x09"
                          "123456789."))
                .find("wider than 64 bits"),
            std::string::npos);
  EXPECT_NE(refusal(bytes("\x80\x02"
                          "cbuiltins\neval\n."))
                .find("builtins.eval"),
            std::string::npos);
  EXPECT_NE(refusal(bytes("\x80\x02"
                          "K\x01"
                          "K\x02R."))
                .find("not a class"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron::checkpoint
