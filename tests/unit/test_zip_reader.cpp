// The zip reader (megatron/checkpoint/zip_reader.h) and torch.save files (torch_file.h) on
// archives torch.save wrote (tests/fixtures/pickle, tools/gen_pickle_fixtures.py): entries found
// by torch's suffixes, data.pkl read whole (CRC-32 checked) and unpickled, a storage read as its
// floats and in ranges, tensors (fp32, bf16, a view at an offset) read as torch saved them; a
// checkpoint whose pickle calls os.system is refused through the archive; truncation, a flipped
// byte, a compressed entry and a non-zip are refused naming the file and the entry.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/checkpoint/zip_reader.h"
#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::checkpoint {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests/fixtures/pickle" / name;
}

std::string refusal(const fs::path& path) {
  try {
    ZipArchive z(path.string());
    for (const auto& e : z.entries()) z.read(e);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A copy of a fixture, changed by `edit`, in a scratch file.
fs::path edited(const std::string& name, const std::function<void(std::vector<char>&)>& edit) {
  std::ifstream in(fixture(name), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  edit(bytes);
  const fs::path out = fs::temp_directory_path() / concat("mt_zip_", ::getpid(), "_", name);
  std::ofstream(out, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return out;
}

TEST(ZipReader, ReadsWhatTorchSaveWrote) {
  ZipArchive z(fixture("torch_state.pt").string());
  const ZipArchive::Entry* pkl = z.find_suffix("data.pkl");
  ASSERT_NE(pkl, nullptr);
  const std::vector<uint8_t> bytes = z.read(*pkl);
  std::ifstream in(fixture("torch_state.data.pkl"), std::ios::binary);
  const std::vector<uint8_t> extracted((std::istreambuf_iterator<char>(in)),
                                       std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes, extracted);  // the bytes Python's zipfile read
  EXPECT_EQ(read_pickle(bytes, pkl->name)->get("iteration")->integer, 7);
  const ZipArchive::Entry* w = z.find_suffix("data/0");  // w's storage: 0..5 as fp32
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->size, 24u);
  const std::vector<uint8_t> storage = z.read(*w);
  float values[6];
  std::memcpy(values, storage.data(), 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], float(i));
  float row[3];
  z.read_range(*w, 12, row, 12);  // v = w[1]
  EXPECT_EQ(row[0], 3.0f);
  EXPECT_EQ(row[2], 5.0f);
  EXPECT_THROW(z.read_range(*w, 16, row, 12), InputError);
  EXPECT_EQ(z.find_suffix("data/7"), nullptr);
  EXPECT_NE(z.find_suffix("byteorder"), nullptr);
}

TEST(ZipReader, ACheckpointCallingOsSystemIsRefused) {
  fs::remove("/tmp/megatron_pickle_pwned");
  ZipArchive z(fixture("malicious.pt").string());
  const ZipArchive::Entry* pkl = z.find_suffix("data.pkl");
  ASSERT_NE(pkl, nullptr);
  try {
    read_pickle(z.read(*pkl), z.path() + ":" + pkl->name);
    FAIL() << "the pickle was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("malicious.pt:malicious/data.pkl"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("posix.system"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists("/tmp/megatron_pickle_pwned"));
}

TEST(ZipReader, DamageIsRefusedNamingTheFileAndEntry) {
  const fs::path cut = edited("torch_state.pt", [](auto& b) { b.resize(b.size() - 30); });
  EXPECT_NE(refusal(cut).find("no end of central directory"), std::string::npos) << refusal(cut);
  const fs::path half = edited("torch_state.pt", [](auto& b) {
    std::vector<char> tail(b.end() - 200, b.end());  // keep the directory, lose the data
    b.resize(300);
    b.insert(b.end(), tail.begin(), tail.end());
  });
  EXPECT_NE(refusal(half), "");
  const fs::path flipped = edited("torch_state.pt", [](auto& b) {
    const std::string marker = "data/0";
    auto it = std::search(b.begin(), b.end(), marker.begin(), marker.end());
    ASSERT_NE(it, b.end());
    // The storage's bytes follow its local header (name, aligned extra field): flip one of w's.
    const auto data = std::search(it, b.end(), std::begin("\x00\x00\x80\x3f"),
                                  std::begin("\x00\x00\x80\x3f") + 4);  // 1.0f
    ASSERT_NE(data, b.end());
    *data ^= 1;
  });
  EXPECT_NE(refusal(flipped).find("data/0' fails its CRC-32"), std::string::npos)
      << refusal(flipped);
  EXPECT_NE(refusal(fixture("deflated.zip")).find("'archive/data.pkl' is compressed (method 8)"),
            std::string::npos)
      << refusal(fixture("deflated.zip"));
  EXPECT_NE(refusal(fixture("plain_p4.pkl")).find("not a zip archive"), std::string::npos);
  for (const fs::path& p : {cut, half, flipped}) fs::remove(p);
}

TEST(TorchFile, TensorsReadAsTorchSavedThem) {
  TorchFile f(fixture("torch_state.pt").string());
  const PickleValue& model = *f.root().get("model");
  ASSERT_TRUE(TorchFile::is_tensor(*model.get("w")));
  EXPECT_FALSE(TorchFile::is_tensor(*f.root().get("iteration")));
  const Tensor w = f.tensor(*model.get("w"), "model.w");
  ASSERT_EQ(w.dtype(), DType::F32);
  ASSERT_EQ(w.shape(), Shape({2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], float(i));
  const Tensor v = f.tensor(*model.get("v"), "model.v");  // w[1]: offset 3 of the same storage
  ASSERT_EQ(v.shape(), Shape({3}));
  EXPECT_EQ(v.data<float>()[0], 3.0f);
  EXPECT_EQ(v.data<float>()[2], 5.0f);
  const Tensor t = f.tensor(*model.get("t"), "model.t");  // w.t(): strides (1, 3)
  ASSERT_EQ(t.shape(), Shape({3, 2}));
  const std::vector<float> want = {0, 3, 1, 4, 2, 5};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], want[static_cast<size_t>(i)]) << i;
  const Tensor b = f.tensor(*model.get("b"), "model.b");
  ASSERT_EQ(b.dtype(), DType::BF16);
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(b.raw());
  EXPECT_EQ(bits[0], 0x3FC0);  // 1.5
  EXPECT_EQ(bits[1], 0xC020);  // -2.5
  try {
    f.tensor(*f.root().get("args"), "args");
    FAIL() << "a Namespace read as a tensor";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("torch_state.pt: args: not a tensor"), std::string::npos)
        << e.what();
  }
  try {
    TorchFile bad(fixture("malicious.pt").string());
    FAIL() << "a checkpoint calling os.system was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("posix.system"), std::string::npos) << e.what();
  }
}

TEST(ZipReader, Crc32IsZipsChecksum) {
  EXPECT_EQ(zip_crc32(0, "123456789", 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(zip_crc32(zip_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}

}  // namespace
}  // namespace megatron::checkpoint
