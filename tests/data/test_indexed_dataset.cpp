// Indexed dataset (.bin/.idx): writer -> reader round trips, the exact byte layout, and
// corrupt / truncated / fuzzed indexes that must give InputError naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "data/indexed_dataset.h"
#include "data_test_util.h"

namespace megatron::data {
namespace {

using testing::expect_input_error;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

std::vector<std::vector<int32_t>> random_docs(std::mt19937& rng, int n, int32_t max_token) {
  std::vector<std::vector<int32_t>> docs(n);
  std::uniform_int_distribution<int> len(0, 40);
  std::uniform_int_distribution<int32_t> tok(0, max_token);
  for (auto& d : docs) {
    d.resize(len(rng));
    for (auto& t : d) t = tok(rng);
  }
  return docs;
}

void round_trip(DType dtype, int32_t max_token) {
  ScratchDir dir;
  const std::string prefix = dir.file("ds");
  std::mt19937 rng(7);
  auto docs = random_docs(rng, 50, max_token);
  docs[3].clear();  // an empty document
  docs[4].clear();  // and two in a row
  {
    IndexedDatasetWriter w(prefix, dtype);
    for (const auto& d : docs) w.add_document(d);
    w.finalize();
  }
  const IndexedDataset ds(prefix);
  EXPECT_EQ(ds.dtype(), dtype);
  EXPECT_EQ(ds.num_documents(), 50);
  int64_t nonempty = 0, total = 0;
  for (const auto& d : docs) nonempty += !d.empty(), total += static_cast<int64_t>(d.size());
  EXPECT_EQ(ds.num_sequences(), nonempty);
  EXPECT_EQ(ds.num_tokens(), total);
  const auto di = ds.document_indices();
  ASSERT_EQ(static_cast<int64_t>(di.size()), 51);
  int64_t seq = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(di[d], seq);
    if (docs[d].empty()) {
      EXPECT_EQ(di[d + 1], di[d]) << "an empty document repeats the boundary";
      continue;
    }
    EXPECT_EQ(di[d + 1], seq + 1);
    EXPECT_EQ(ds.sequence_length(seq), static_cast<int64_t>(docs[d].size()));
    EXPECT_EQ(ds.read(seq), docs[d]);
    // A partial read.
    if (docs[d].size() >= 3) {
      int32_t two[2];
      ds.read(seq, 1, 2, two);
      EXPECT_EQ(two[0], docs[d][1]);
      EXPECT_EQ(two[1], docs[d][2]);
    }
    ++seq;
  }
  EXPECT_EQ(di.back(), ds.num_sequences());
  EXPECT_EQ(std::filesystem::file_size(prefix + ".bin"),
            static_cast<uintmax_t>(total) * dtype_size(dtype));
  EXPECT_FALSE(std::filesystem::exists(prefix + ".bin.tmp"));
  EXPECT_FALSE(std::filesystem::exists(prefix + ".idx.tmp"));
}

TEST(IndexedDataset, RoundTripUint16) { round_trip(DType::U16, 65535); }
TEST(IndexedDataset, RoundTripInt32) { round_trip(DType::I32, 2000000000); }
TEST(IndexedDataset, RoundTripOtherIntegerTypes) {
  round_trip(DType::U8, 255);
  round_trip(DType::I16, 32767);
  round_trip(DType::I64, 2147483647);
}

TEST(IndexedDataset, EmptyDatasetAndOnlyEmptyDocuments) {
  ScratchDir dir;
  {
    IndexedDatasetWriter w(dir.file("none"), DType::U16);
    w.finalize();
  }
  const IndexedDataset none(dir.file("none"));
  EXPECT_EQ(none.num_sequences(), 0);
  EXPECT_EQ(none.num_documents(), 0);
  {
    IndexedDatasetWriter w(dir.file("empty"), DType::U16);
    w.add_document({});
    w.add_document({});
    w.finalize();
  }
  const IndexedDataset empty(dir.file("empty"));
  EXPECT_EQ(empty.num_sequences(), 0);
  EXPECT_EQ(empty.num_documents(), 2);
  EXPECT_EQ(std::vector<int64_t>(empty.document_indices().begin(), empty.document_indices().end()),
            (std::vector<int64_t>{0, 0, 0}));
}

TEST(IndexedDataset, WriterRejectsTokensOutsideTheDtype) {
  ScratchDir dir;
  IndexedDatasetWriter w(dir.file("ds"), DType::U16);
  const std::vector<int32_t> bad{1, 70000};
  expect_input_error([&] { w.add_document(bad); }, {dir.file("ds"), "70000", "uint16"});
  const std::vector<int32_t> neg{-1};
  expect_input_error([&] { w.add_document(neg); }, {"-1"});
  expect_input_error([&] { IndexedDatasetWriter(dir.file("f"), DType::F32); }, {"integer"});
}

TEST(IndexedDataset, UnfinalizedWriterLeavesNoFiles) {
  ScratchDir dir;
  {
    IndexedDatasetWriter w(dir.file("ds"), DType::U16);
    const std::vector<int32_t> t{1, 2, 3};
    w.add_document(t);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("ds.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ds.bin.tmp")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("ds.idx")));
}

// The small dataset whose exact bytes are spelled out below: uint16, documents
// [1 2 3], [] (empty), and a sentence-split document of sequences [4] and [5 6].
void write_small(const std::string& prefix) {
  IndexedDatasetWriter w(prefix, DType::U16);
  const std::vector<int32_t> a{1, 2, 3}, b{4}, c{5, 6};
  w.add_document(a);
  w.add_document({});
  w.add_sequence(b);
  w.add_sequence(c);
  w.end_document();
  w.finalize();
}

void put_u64(std::vector<unsigned char>& v, uint64_t x) {
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<unsigned char>(x >> (8 * i)));
}
void put_u32(std::vector<unsigned char>& v, uint32_t x) {
  for (int i = 0; i < 4; ++i) v.push_back(static_cast<unsigned char>(x >> (8 * i)));
}

TEST(IndexedDataset, ExactByteLayout) {
  ScratchDir dir;
  const std::string prefix = dir.file("small");
  write_small(prefix);

  std::vector<unsigned char> idx = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};  // magic
  put_u64(idx, 1);                                                             // version
  idx.push_back(8);                                                            // dtype: uint16
  put_u64(idx, 3);                                                             // sequences
  put_u64(idx, 4);                                                             // doc boundaries
  put_u32(idx, 3), put_u32(idx, 1), put_u32(idx, 2);                           // lengths
  put_u64(idx, 0), put_u64(idx, 6), put_u64(idx, 8);                           // byte pointers
  put_u64(idx, 0), put_u64(idx, 1), put_u64(idx, 1), put_u64(idx, 3);          // document idx
  ASSERT_EQ(idx.size(), 34u + 3 * 4 + 3 * 8 + 4 * 8);
  EXPECT_EQ(read_bytes(prefix + ".idx"), idx);
  const std::vector<unsigned char> bin = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0};
  EXPECT_EQ(read_bytes(prefix + ".bin"), bin);

  // And a hand-written file reads back.
  write_bytes(dir.file("hand.idx"), idx);
  write_bytes(dir.file("hand.bin"), bin);
  const IndexedDataset ds(dir.file("hand"));
  EXPECT_EQ(ds.num_sequences(), 3);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.read(2), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(ds.sequence_pointer(2), 8);
}

TEST(IndexedDataset, MissingFilesNameTheFile) {
  ScratchDir dir;
  expect_input_error([&] { IndexedDataset ds(dir.file("nothing")); }, {dir.file("nothing.idx")});
  write_small(dir.file("s"));
  std::filesystem::remove(dir.file("s.bin"));
  expect_input_error([&] { IndexedDataset ds(dir.file("s")); }, {dir.file("s.bin")});
}

class CorruptIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_.file("small");
    write_small(prefix_);
    idx_ = read_bytes(prefix_ + ".idx");
  }
  // Writes `bytes` as the .idx and expects loading to fail with a message naming the .idx file
  // and containing `needle`.
  void expect_bad(const std::vector<unsigned char>& bytes, const std::string& needle) {
    write_bytes(prefix_ + ".idx", bytes);
    expect_input_error([&] { IndexedDataset ds(prefix_); }, {prefix_ + ".idx", needle});
  }
  template <typename T>
  std::vector<unsigned char> with(size_t offset, T value) const {
    auto b = idx_;
    std::memcpy(b.data() + offset, &value, sizeof(T));
    return b;
  }
  ScratchDir dir_;
  std::string prefix_;
  std::vector<unsigned char> idx_;
  // Offsets in the small index.
  static constexpr size_t kDtype = 17, kN = 18, kD = 26, kLengths = 34, kPointers = 34 + 12,
                          kDocs = 34 + 36;
};

TEST_F(CorruptIndex, TruncatedAtEveryLength) {
  for (size_t n = 0; n < idx_.size(); ++n) {
    SCOPED_TRACE("truncated to " + std::to_string(n) + " bytes");
    expect_bad(std::vector<unsigned char>(idx_.begin(), idx_.begin() + static_cast<long>(n)), "");
  }
}

TEST_F(CorruptIndex, TrailingBytes) {
  auto b = idx_;
  b.push_back(0);
  expect_bad(b, "bytes");
}

TEST_F(CorruptIndex, BadMagic) { expect_bad(with<char>(0, 'X'), "magic"); }
TEST_F(CorruptIndex, BadVersion) { expect_bad(with<uint64_t>(9, 2), "version 2"); }
TEST_F(CorruptIndex, BadDtypeCode) {
  expect_bad(with<uint8_t>(kDtype, 0), "dtype code 0");
  expect_bad(with<uint8_t>(kDtype, 9), "dtype code 9");
  expect_bad(with<uint8_t>(kDtype, 255), "dtype code 255");
  expect_bad(with<uint8_t>(kDtype, 7), "not an integer token type");  // float32
}
TEST_F(CorruptIndex, CountsLargerThanFile) {
  expect_bad(with<uint64_t>(kN, 4), "counts");
  expect_bad(with<uint64_t>(kN, uint64_t{1} << 62), "counts");
  expect_bad(with<uint64_t>(kN, ~uint64_t{0}), "counts");
  expect_bad(with<uint64_t>(kD, 5), "counts");
  expect_bad(with<uint64_t>(kD, ~uint64_t{0} / 8 + 1), "counts");
  expect_bad(with<uint64_t>(kD, 0), "");
}
TEST_F(CorruptIndex, PointerPastEndOfBin) {
  expect_bad(with<int64_t>(kPointers + 16, 1000), "pointer");
  expect_bad(with<int64_t>(kPointers + 8, -2), "pointer");
  expect_bad(with<int32_t>(kLengths + 8, 100), "past the end");
  expect_bad(with<int32_t>(kLengths, -1), "negative length");
}
TEST_F(CorruptIndex, NonMonotonicDocumentIndex) {
  expect_bad(with<int64_t>(kDocs + 16, 0), "not monotonic");
  expect_bad(with<int64_t>(kDocs, 1), "must be 0");
  expect_bad(with<int64_t>(kDocs + 24, 2), "sequence count");
  expect_bad(with<int64_t>(kDocs + 16, 7), "exceeds");
}
TEST_F(CorruptIndex, TruncatedOrOversizedBin) {
  const auto bin = read_bytes(prefix_ + ".bin");
  write_bytes(prefix_ + ".bin", std::vector<unsigned char>(bin.begin(), bin.end() - 1));
  expect_input_error([&] { IndexedDataset ds(prefix_); }, {prefix_ + ".bin", "past the end"});
  write_bytes(prefix_ + ".bin", {});
  expect_input_error([&] { IndexedDataset ds(prefix_); }, {prefix_ + ".bin"});
  auto longer = bin;
  longer.push_back(0);
  longer.push_back(0);
  write_bytes(prefix_ + ".bin", longer);
  expect_input_error([&] { IndexedDataset ds(prefix_); }, {prefix_ + ".bin", "mismatched"});
}

// Random byte flips and truncations of a valid index: loading must either succeed and read
// consistently, or throw InputError naming the file. Never crash, never another exception.
TEST(IndexedDatasetFuzz, FlipAndTrimIndexBytes) {
  ScratchDir dir;
  const std::string prefix = dir.file("fuzz");
  std::mt19937 rng(1234);
  {
    IndexedDatasetWriter w(prefix, DType::U16);
    auto docs = random_docs(rng, 24, 65535);
    docs[5].clear();
    for (size_t d = 0; d < docs.size(); ++d) {
      if (d % 7 == 3 && docs[d].size() > 2) {  // some sentence-split documents
        const auto half = static_cast<long>(docs[d].size() / 2);
        w.add_sequence(std::span<const int32_t>(docs[d].data(), static_cast<size_t>(half)));
        w.add_sequence(std::span<const int32_t>(docs[d].data() + half, docs[d].size() - half));
        w.end_document();
      } else {
        w.add_document(docs[d]);
      }
    }
    w.finalize();
  }
  const auto good = read_bytes(prefix + ".idx");
  uint64_t n_seq = 0, d_count = 0;
  std::memcpy(&n_seq, good.data() + 18, 8);
  std::memcpy(&d_count, good.data() + 26, 8);
  const auto bin_size = static_cast<int64_t>(std::filesystem::file_size(prefix + ".bin"));
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    auto b = good;
    const int mode = static_cast<int>(rng() % 6);
    if (mode <= 2) {  // flip 1..4 bytes (half of them in the header)
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t range = (rng() % 2) ? 34 : b.size();
        b[rng() % range] ^= static_cast<unsigned char>(1 + rng() % 255);
      }
    }
    if (mode == 1 || mode == 3) b.resize(rng() % (b.size() + 1));   // trim
    if (mode == 4) b[17] = static_cast<unsigned char>(rng() % 10);  // another dtype code
    if (mode == 5) {  // move one inner document boundary (valid when it stays monotonic)
      const size_t docs_off = b.size() - d_count * 8;
      const size_t k = 1 + rng() % (d_count - 2);
      const auto v = static_cast<int64_t>(rng() % (n_seq + 2));
      std::memcpy(b.data() + docs_off + 8 * k, &v, 8);
    }
    write_bytes(prefix + ".idx", b);
    try {
      const IndexedDataset ds(prefix);
      ++loaded;
      int64_t tokens = 0;
      std::vector<int32_t> buf;
      for (int64_t s = 0; s < ds.num_sequences(); ++s) {
        buf.resize(static_cast<size_t>(ds.sequence_length(s)));
        ds.read(s, 0, static_cast<int64_t>(buf.size()), buf.data());
        tokens += static_cast<int64_t>(buf.size());
      }
      EXPECT_EQ(tokens, ds.num_tokens());
      EXPECT_EQ(tokens * static_cast<int64_t>(dtype_size(ds.dtype())), bin_size);
      const auto di = ds.document_indices();
      ASSERT_FALSE(di.empty());
      EXPECT_EQ(di.front(), 0);
      EXPECT_EQ(di.back(), ds.num_sequences());
      for (size_t k = 1; k < di.size(); ++k) EXPECT_LE(di[k - 1], di[k]);
    } catch (const InputError& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find(prefix), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(loaded, 50) << "some mutations (dtype 8 -> 3, monotonic boundary moves) stay valid";
  EXPECT_EQ(loaded + rejected, 2000);
}

TEST(IndexedDataset, AddIndexMerges) {
  ScratchDir dir;
  std::mt19937 rng(3);
  const auto d1 = random_docs(rng, 5, 60000), d2 = random_docs(rng, 7, 60000);
  for (const auto& [name, docs] : {std::pair{"a", d1}, std::pair{"b", d2}}) {
    IndexedDatasetWriter w(dir.file(name), DType::U16);
    for (const auto& d : docs) w.add_document(d);
    w.finalize();
  }
  {
    IndexedDatasetWriter w(dir.file("m"), DType::U16);
    w.add_index(IndexedDataset(dir.file("a")));
    w.add_index(IndexedDataset(dir.file("b")));
    w.finalize();
  }
  IndexedDatasetWriter direct(dir.file("direct"), DType::U16);
  for (const auto& d : d1) direct.add_document(d);
  for (const auto& d : d2) direct.add_document(d);
  direct.finalize();
  EXPECT_EQ(read_bytes(dir.file("m.idx")), read_bytes(dir.file("direct.idx")));
  EXPECT_EQ(read_bytes(dir.file("m.bin")), read_bytes(dir.file("direct.bin")));
  IndexedDatasetWriter w32(dir.file("x"), DType::I32);
  expect_input_error([&] { w32.add_index(IndexedDataset(dir.file("a"))); },
                     {dir.file("a"), "dtype"});
}

TEST(IndexedDataset, DtypeCodesAndOptimalDtype) {
  EXPECT_EQ(indexed_dtype_code(DType::U8), 1);
  EXPECT_EQ(indexed_dtype_code(DType::I8), 2);
  EXPECT_EQ(indexed_dtype_code(DType::I16), 3);
  EXPECT_EQ(indexed_dtype_code(DType::I32), 4);
  EXPECT_EQ(indexed_dtype_code(DType::I64), 5);
  EXPECT_EQ(indexed_dtype_code(DType::F64), 6);
  EXPECT_EQ(indexed_dtype_code(DType::F32), 7);
  EXPECT_EQ(indexed_dtype_code(DType::U16), 8);
  for (uint8_t c = 1; c <= 8; ++c)
    EXPECT_EQ(indexed_dtype_code(indexed_dtype_from_code(c, "f")), c);
  EXPECT_EQ(optimal_token_dtype(257), DType::U16);
  EXPECT_EQ(optimal_token_dtype(65499), DType::U16);
  EXPECT_EQ(optimal_token_dtype(65500), DType::I32);
  EXPECT_EQ(optimal_token_dtype(128256), DType::I32);
}

}  // namespace
}  // namespace megatron::data
