// safetensors reader/writer: round trips of every dtype (scalars and empty tensors included),
// the exact byte layout, and hostile input: every truncation of a file, random byte
// corruption, and hand-made headers with each kind of defect -> InputError naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "megatron/checkpoint/crc32c.h"
#include "megatron/checkpoint/safetensors.h"

namespace megatron::checkpoint::safetensors {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           concat("mt_safetensors_", ::getpid(), "_",
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  static std::string read_all(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  }
  static void write_raw(const std::string& p, const std::string& bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  // A file from a header text and a data buffer of `data_bytes` zero bytes.
  static std::string assemble(const std::string& header, size_t data_bytes) {
    std::string out(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i, n >>= 8) out[i] = static_cast<char>(n & 0xff);
    return out + header + std::string(data_bytes, '\0');
  }
  // Opening must fail with an InputError naming the file and containing `what`.
  void expect_rejected(const std::string& p, const std::string& what) {
    try {
      File f(p);
      ADD_FAILURE() << "accepted " << p << " (expected: " << what << ")";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(p));
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeScalarsAndEmptyTensors) {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
  std::vector<int64_t> i64 = {-1, 0, 1LL << 40, 9};
  std::vector<uint8_t> u8 = {0, 1, 254, 255, 7};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x7f80};
  double scalar = 3.141592653589793;
  Writer w;
  w.add({"layers.0.weight", "F32", {2, 3}, f32.data()});
  w.add({"steps", "I64", {4}, i64.data()});
  w.add({"bytes", "U8", {5}, u8.data()});
  w.add({"half", "BF16", {3}, bf16.data()});
  w.add({"pi", "F64", {}, &scalar});
  w.add({"empty", "F32", {0, 3}, nullptr});
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcode \"quoted\"");
  const std::string p = path("a.safetensors");
  w.write(p);

  const std::string bytes = read_all(p);
  ASSERT_EQ(bytes.size(), w.file_size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8-byte alignment";
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.substr(8, n), w.header());

  File f(p);
  EXPECT_EQ(f.data_start(), 8 + n);
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "ünïcode \"quoted\"");
  const TensorInfo& w0 = f.get("layers.0.weight");
  EXPECT_EQ(w0.dtype, "F32");
  EXPECT_EQ(w0.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w0.begin, 0u);
  EXPECT_EQ(w0.end, 24u);
  Tensor t = f.read("layers.0.weight");
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(t.raw(), f32.data(), 24), 0);
  Tensor ti = f.read("steps");
  EXPECT_EQ(ti.dtype(), DType::I64);
  EXPECT_EQ(std::memcmp(ti.raw(), i64.data(), 32), 0);
  EXPECT_EQ(std::memcmp(f.read("bytes").raw(), u8.data(), 5), 0);
  EXPECT_EQ(f.read("half").dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(f.read("half").raw(), bf16.data(), 6), 0);
  Tensor pi = f.read("pi");
  EXPECT_EQ(pi.ndim(), 0);
  EXPECT_EQ(pi.data<double>()[0], scalar);
  EXPECT_EQ(f.read("empty").numel(), 0);
  // Partial reads, range-checked.
  float two[2];
  f.read_bytes(w0, 8, 8, two);
  EXPECT_EQ(two[0], 3.25f);
  EXPECT_EQ(two[1], 0.0f);
  EXPECT_THROW(f.read_bytes(w0, 20, 8, two), Error);
  EXPECT_EQ(f.find("missing"), nullptr);
  try {
    f.get("missing");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr(p));
    EXPECT_THAT(e.what(), HasSubstr("'missing'"));
  }
}

TEST_F(SafetensorsTest, ReadsAFileAssembledByHand) {
  // The layout other implementations produce: tensors in any header order, offsets relative
  // to the data buffer, no metadata, no padding.
  const std::string header =
      R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string file = assemble(header, 0);
  const float a[2] = {1.0f, 2.0f};
  const int32_t b[2] = {-3, 4};
  file.append(reinterpret_cast<const char*>(a), 8);
  file.append(reinterpret_cast<const char*>(b), 8);
  write_raw(path("hand.safetensors"), file);
  File f(path("hand.safetensors"));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");  // data-offset order
  EXPECT_EQ(f.read("a").data<float>()[1], 2.0f);
  EXPECT_EQ(f.read("b").data<int32_t>()[0], -3);
  EXPECT_TRUE(f.metadata().empty());
}

// CRC-32C: the standard check value, hardware and portable paths equal on odd lengths and
// alignments, the writer's checksum equal to the file's.
TEST(Crc32c, KnownValueAndBothPathsAgree) {
  const char* check = "123456789";
  EXPECT_EQ(checkpoint::crc32c(0, check, 9), 0xE3069283u);
  EXPECT_EQ(checkpoint::crc32c_portable(0, check, 9), 0xE3069283u);
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t off : {0, 1, 3, 7})
    for (size_t n : {0, 1, 8, 15, 64, 993 - 7})
      EXPECT_EQ(checkpoint::crc32c(0, data.data() + off, n),
                checkpoint::crc32c_portable(0, data.data() + off, n))
          << off << " " << n;
  // Incremental = whole.
  EXPECT_EQ(checkpoint::crc32c(checkpoint::crc32c(0, data.data(), 500), data.data() + 500, 500),
            checkpoint::crc32c(0, data.data(), 1000));
}

TEST_F(SafetensorsTest, WriterReturnsTheFilesChecksum) {
  std::vector<float> a(37, 1.5f);
  safetensors::Writer w;
  w.add("a", Tensor::wrap(a.data(), {37}, DType::F32));
  const std::string path = this->path("c.safetensors");
  const uint32_t crc = w.write(path);
  EXPECT_EQ(crc, checkpoint::crc32c_of_file(path));
}

TEST_F(SafetensorsTest, WriterRejectsDuplicateAndReservedNames) {
  float x = 1;
  Writer w;
  w.add({"x", "F32", {1}, &x});
  EXPECT_THROW(w.add({"x", "F32", {1}, &x}), Error);
  EXPECT_THROW(w.add({"__metadata__", "F32", {1}, &x}), Error);
  EXPECT_THROW(w.add({"y", "F31", {1}, &x}), Error);
  // An entry without data lays out a StreamWriter's file; writing it directly is an error.
  w.add({"z", "F32", {1}, nullptr});
  EXPECT_THROW(w.write((dir_ / "no_data.safetensors").string()), Error);
}

TEST_F(SafetensorsTest, StreamWriterFillsInAnyOrderAndChecksCompleteness) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8};
  Writer layout;
  layout.add({"a", "F32", {2, 3}, nullptr});
  layout.add({"b", "F32", {2}, nullptr});
  Writer direct;
  direct.add({"a", "F32", {2, 3}, a.data()});
  direct.add({"b", "F32", {2}, b.data()});
  const std::string path = (dir_ / "streamed.safetensors").string();
  {
    StreamWriter s(layout, path);
    s.write_at(1, 0, b.data(), 8);
    s.write_at(0, 12, a.data() + 3, 12);
    s.write_at(0, 0, a.data(), 12);
    EXPECT_EQ(s.finish(), direct.write((dir_ / "direct.safetensors").string()));
  }
  const File f(path);
  const Tensor t = f.read("a");
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  StreamWriter partial(layout, (dir_ / "partial.safetensors").string());
  partial.write_at(0, 0, a.data(), 24);
  EXPECT_THROW(partial.finish(), Error);                     // b never written
  EXPECT_THROW(partial.write_at(1, 4, b.data(), 8), Error);  // past the entry's end
}

TEST_F(SafetensorsTest, EveryTruncationIsAnInputErrorNamingTheFile) {
  std::vector<float> v(13);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Writer w;
  w.add({"w", "F32", {13}, v.data()});
  w.add({"b", "F32", {0}, nullptr});
  w.set_metadata("k", "v");
  const std::string full_path = path("full.safetensors");
  w.write(full_path);
  const std::string bytes = read_all(full_path);
  const std::string p = path("cut.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    write_raw(p, bytes.substr(0, len));
    try {
      File f(p);
      ADD_FAILURE() << "a file cut to " << len << " of " << bytes.size() << " bytes was accepted";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(p)) << "cut to " << len;
    }
  }
  write_raw(p, bytes + "x");
  expect_rejected(p, "trailing bytes");
}

TEST_F(SafetensorsTest, RandomCorruptionNeverCrashes) {
  std::vector<float> v(40, 1.0f);
  Writer w;
  w.add({"a", "F32", {4, 5}, v.data()});
  w.add({"b", "F32", {20}, v.data()});
  w.set_metadata("format", "pt");
  w.write(path("good.safetensors"));
  const std::string good = read_all(path("good.safetensors"));
  std::mt19937 rng(1234);
  const std::string p = path("bad.safetensors");
  int rejected = 0;
  for (int trial = 0; trial < 800; ++trial) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      // Mostly the length field and header, where the parser lives.
      const size_t at = rng() % std::min<size_t>(bytes.size(), trial % 2 ? 16 : bytes.size());
      bytes[at] = static_cast<char>(rng() & 0xff);
    }
    write_raw(p, bytes);
    try {
      File f(p);
      for (const TensorInfo& t : f.tensors()) {
        std::vector<char> buf(t.nbytes());
        f.read_bytes(t, 0, t.nbytes(), buf.data());
      }
    } catch (const InputError& e) {
      ++rejected;
      ASSERT_THAT(e.what(), HasSubstr(p));
    }
  }
  EXPECT_GT(rejected, 200);
}

struct BadHeader {
  const char* label;
  std::string header;
  size_t data_bytes;
  const char* error;
};

TEST_F(SafetensorsTest, MalformedHeadersAreRejectedWithTheReason) {
  const std::string f32_2 = R"("dtype":"F32","shape":[2])";
  const std::vector<BadHeader> cases = {
      {"not json", "{bad", 0, "not valid JSON"},
      {"array", "[1, 2]", 0, "must start with '{'"},
      {"empty", "", 0, "must start with '{'"},
      {"tensor not object", R"({"t": 5})", 0, "is not an object"},
      {"missing dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", 4, "\"dtype\""},
      {"unknown dtype", R"({"t":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4,
       "unknown dtype"},
      {"missing shape", R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4, "\"shape\""},
      {"negative dim", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "non-negative"},
      {"fractional dim", R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,4]}})", 4,
       "non-negative"},
      {"string dim", R"({"t":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8,
       "non-negative"},
      {"shape overflow",
       R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})",
       4, "overflows"},
      {"too many dims", R"({"t":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
       1, "dimensions"},
      {"offsets arity", "{\"t\":{" + f32_2 + R"(,"data_offsets":[0]}})", 8, "data_offsets"},
      {"negative offset", "{\"t\":{" + f32_2 + R"(,"data_offsets":[-8,0]}})", 8, "non-negative"},
      {"reversed offsets", "{\"t\":{" + f32_2 + R"(,"data_offsets":[8,0]}})", 8, "end before"},
      {"past the data", "{\"t\":{" + f32_2 + R"(,"data_offsets":[0,16]}})", 8, "reach past"},
      {"huge offset",
       "{\"t\":{" + f32_2 + R"(,"data_offsets":[18446744073709551608,18446744073709551615]}})", 8,
       "reach past"},
      {"shape product", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       "needs 3 x 4"},
      {"wrong dtype size", R"({"t":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8,
       "needs 2 x 8"},
      {"overlap",
       "{\"a\":{" + f32_2 + R"(,"data_offsets":[0,8]},"b":{)" + f32_2 +
           R"(,"data_offsets":[4,12]}})",
       12, "overlap"},
      {"same range",
       "{\"a\":{" + f32_2 + R"(,"data_offsets":[0,8]},"b":{)" + f32_2 +
           R"(,"data_offsets":[0,8]}})",
       8, "overlap"},
      {"hole",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, "belong to no tensor"},
      {"trailing data", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "cover 4"},
      {"duplicate tensor",
       "{\"a\":{" + f32_2 + R"(,"data_offsets":[0,8]},"a":{)" + f32_2 +
           R"(,"data_offsets":[0,8]}})",
       8, "'a' twice"},
      {"duplicate field", R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, "'dtype' twice"},
      {"metadata not object", R"({"__metadata__": [1]})", 0, "__metadata__"},
      {"metadata value", R"({"__metadata__": {"k": 1}})", 0, "__metadata__ value of 'k'"},
      {"deep nesting", R"({"a":{"shape":[[[1]]]}})", 0, "nested deeper"},
      {"very deep nesting", "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
       0, "nested deeper"},
      {"invalid utf-8", "{\"\xff\xfe\":{" + f32_2 + R"(,"data_offsets":[0,8]}})", 8,
       "not valid JSON"},
  };
  for (const BadHeader& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string p = path("bad.safetensors");
    write_raw(p, assemble(c.header, c.data_bytes));
    expect_rejected(p, c.error);
  }
}

TEST_F(SafetensorsTest, BadLengthFieldsAndTinyFiles) {
  const std::string p = path("len.safetensors");
  write_raw(p, "");
  expect_rejected(p, "too short");
  write_raw(p, std::string(7, '\0'));
  expect_rejected(p, "too short");
  std::string huge(8, '\0');
  huge[5] = 1;  // 2^40
  write_raw(p, huge + "{}");
  expect_rejected(p, "100 MB");
  std::string past(8, '\0');
  past[0] = 64;
  write_raw(p, past + "{}");
  expect_rejected(p, "reaches past the end");
  // An empty header object with no data is a valid (empty) file.
  write_raw(p, assemble("{}      ", 0));
  File f(p);
  EXPECT_TRUE(f.tensors().empty());
  expect_rejected(path("does_not_exist.safetensors"), "cannot open");
}

}  // namespace
}  // namespace megatron::checkpoint::safetensors
