// GPTDataset: Megatron's document / sample / shuffle indices (checked against
// tests/fixtures/data/gpt_dataset.json, made by tools/gen_gpt_dataset_fixture.py from an
// independent Python + numpy statement of Megatron's algorithm), index caching, errors, mock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "data/gpt_dataset.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_input_error;
using testing::ScratchDir;

const json& fixture() {
  static const json j = [] {
    std::ifstream in(std::string(MEGATRON_SOURCE_DIR) + "/tests/fixtures/data/gpt_dataset.json");
    EXPECT_TRUE(in.good());
    return json::parse(in);
  }();
  return j;
}

// Writes PREFIX.bin/.idx with one sequence per length; token = 100000 * corpus + position of
// the token in the concatenated sequences (the fixture's convention).
std::shared_ptr<const SequenceSource> write_corpus(const std::string& prefix,
                                                   const std::vector<int64_t>& lengths,
                                                   int corpus = 0) {
  IndexedDatasetWriter w(prefix, DType::I32);
  int32_t pos = 0;
  for (int64_t l : lengths) {
    std::vector<int32_t> t(static_cast<size_t>(l));
    for (auto& x : t) x = 100000 * corpus + pos++;
    w.add_document(t);
  }
  w.finalize();
  return std::make_shared<IndexedSequenceSource>(prefix);
}

template <typename A, typename B>
void expect_same(const A& got, const B& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(static_cast<int64_t>(got[i]), static_cast<int64_t>(want[i]))
        << what << " [" << i << "]";
}

void expect_matches_case(const GPTDataset& ds, const json& c) {
  const std::string what = std::string("case ") + c["corpus"].get<std::string>() + " split " +
                           std::to_string(c["split_id"].get<int>()) + " S " +
                           std::to_string(c["seq_length"].get<int64_t>());
  EXPECT_EQ(ds.plan().tokens_per_epoch, c["tokens_per_epoch"].get<int64_t>()) << what;
  EXPECT_EQ(ds.plan().num_epochs, c["num_epochs"].get<int64_t>()) << what;
  EXPECT_EQ(ds.plan().separate_final_epoch, c["separate_final_epoch"].get<bool>()) << what;
  EXPECT_EQ(ds.num_samples(), c["num_samples_total"].get<int64_t>()) << what;
  expect_same(ds.document_index(), c["document_index"].get<std::vector<int64_t>>(), what + " doc");
  expect_same(ds.sample_index(), c["sample_index"].get<std::vector<int64_t>>(), what + " sample");
  expect_same(ds.shuffle_index(), c["shuffle_index"].get<std::vector<int64_t>>(),
              what + " shuffle");
  const auto samples = c["samples"].get<std::vector<std::vector<int64_t>>>();
  std::vector<int32_t> buf(static_cast<size_t>(ds.seq_length() + 1));
  for (size_t i = 0; i < samples.size(); ++i) {
    ds.get(static_cast<int64_t>(i), buf.data());
    expect_same(buf, samples[i], what + " sample " + std::to_string(i));
  }
}

GPTDatasetConfig config_of(const json& c) {
  GPTDatasetConfig cfg;
  cfg.seq_length = c["seq_length"].get<int64_t>();
  cfg.seed = c["seed"].get<uint64_t>();
  if (!c["num_samples"].is_null()) cfg.num_samples = c["num_samples"].get<int64_t>();
  cfg.log = [](const std::string&) {};
  return cfg;
}

TEST(GPTDataset, MatchesMegatronFixture) {
  ScratchDir dir;
  std::map<std::string, std::shared_ptr<const SequenceSource>> sources;
  for (const auto& [name, lengths] : fixture()["corpora"].items())
    sources[name] = write_corpus(dir.file(name), lengths.get<std::vector<int64_t>>());
  int n = 0;
  for (const json& c : fixture()["gpt_cases"]) {
    const auto& src = sources.at(c["corpus"].get<std::string>());
    const int split_id = c["split_id"].get<int>();
    const DocumentRange r =
        split_document_ranges(c["split"].get<std::string>(), src->num_sequences())[split_id];
    ASSERT_EQ(r.begin, c["sequence_range"][0].get<int64_t>());
    ASSERT_EQ(r.end, c["sequence_range"][1].get<int64_t>());
    const auto ds = GPTDataset::build(src, split_id, r, config_of(c));
    expect_matches_case(*ds, c);
    ++n;
  }
  EXPECT_EQ(n, 12);
}

// The tiny case by hand. Sequence lengths [3, 5, 2, 4] (T = 14), split "1", S = 4, seed 1234,
// num_samples unset -> 1 epoch, (14 - 1) / 4 = 3 samples.
// RandomState(1234) outputs: 822569775, 2137449171, 2671936806, 3512589365, 1880026316,
// 2629000564, ...
//  document index: shuffle [0, 1, 2, 3]: i=3 (mask 3): 822569775&3 = 3 -> j=3; i=2: 2137449171&3
//    = 3 > 2 rejected, 2671936806&3 = 2 -> j=2; i=1 (mask 1): 3512589365&1 = 1 -> j=1:
//    [0, 1, 2, 3] (stream: seq0 = tokens 0..2, seq1 = 3..7, seq2 = 8..9, seq3 = 10..13).
//  sample index: windows of 5 tokens at stream offsets 0, 4, 8, 12 -> pairs (0,0) (1,1) (2,0)
//    (3,2) (position in the document index, offset in that sequence).
//  shuffle index: shuffle [0, 1, 2] with the same state: i=2: 1880026316&3 = 0 -> swap a[2],a[0]
//    -> [2, 1, 0]; i=1: 2629000564&1 = 0 -> swap a[1],a[0] -> [1, 2, 0].
//  get(0) = window 1 = tokens 4..8, get(1) = 8..12, get(2) = 0..4.
TEST(GPTDataset, HandComputedTinyCase) {
  ScratchDir dir;
  auto src = write_corpus(dir.file("tiny"), {3, 5, 2, 4});
  GPTDatasetConfig cfg;
  cfg.seq_length = 4;
  cfg.seed = 1234;
  const auto ds = GPTDataset::build(src, 0, {0, 4}, cfg);
  expect_same(ds->document_index(), std::vector<int>{0, 1, 2, 3}, "doc");
  expect_same(ds->sample_index(), std::vector<int>{0, 0, 1, 1, 2, 0, 3, 2}, "sample");
  expect_same(ds->shuffle_index(), std::vector<int>{1, 2, 0}, "shuffle");
  std::vector<int32_t> buf(5);
  ds->get(0, buf.data());
  EXPECT_EQ(buf, (std::vector<int32_t>{4, 5, 6, 7, 8}));
  ds->get(1, buf.data());
  EXPECT_EQ(buf, (std::vector<int32_t>{8, 9, 10, 11, 12}));
  ds->get(2, buf.data());
  EXPECT_EQ(buf, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(ds->get(3, buf.data()), Error);
  EXPECT_THROW(ds->get(-1, buf.data()), Error);
}

TEST(GPTDataset, PlanThresholdAndEpochs) {
  // T = 100, S = 10: per epoch (100 - 1) / 10 = 9 samples; threshold int(0.8 * 9) = 7.
  auto p = plan_gpt_indices(100, std::nullopt, 10, "x");
  EXPECT_EQ(p.num_epochs, 1);
  EXPECT_EQ(p.num_samples_total, 9);
  p = plan_gpt_indices(100, 9, 10, "x");  // 91 tokens <= 100
  EXPECT_EQ(p.num_epochs, 1);
  p = plan_gpt_indices(100, 10, 10, "x");  // 101 tokens -> 2 epochs; sans = 9, final gives 1 < 7
  EXPECT_EQ(p.num_epochs, 2);
  EXPECT_TRUE(p.separate_final_epoch);
  EXPECT_EQ(p.num_samples_sans_final_epoch, 9);
  EXPECT_EQ(p.num_samples_total, 19);
  p = plan_gpt_indices(100, 16, 10, "x");  // final gives 7: not < 7
  EXPECT_FALSE(p.separate_final_epoch);
  p = plan_gpt_indices(100, 15, 10, "x");  // final gives 6 < 7
  EXPECT_TRUE(p.separate_final_epoch);
  expect_input_error([] { plan_gpt_indices(1, 5, 10, "dataset 'q'"); },
                     {"dataset 'q'", "1 tokens"});
  expect_input_error([] { plan_gpt_indices(100, 5, 0, "dataset 'q'"); }, {"seq_length"});
}

TEST(GPTDataset, EveryWindowIsContiguousAndEpochsCoverEverything) {
  ScratchDir dir;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 200; ++i) lengths.push_back(1 + (i * 37) % 23);
  auto src = write_corpus(dir.file("c"), lengths);
  const int64_t T = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  GPTDatasetConfig cfg;
  cfg.seq_length = 13;
  cfg.num_samples = 3 * T / 13;
  const auto ds = GPTDataset::build(src, 0, {0, 200}, cfg);
  EXPECT_GE(ds->num_samples(), *cfg.num_samples);
  // The shuffle index is a permutation.
  std::vector<int64_t> sh(ds->shuffle_index().begin(), ds->shuffle_index().end());
  std::sort(sh.begin(), sh.end());
  for (size_t i = 0; i < sh.size(); ++i) ASSERT_EQ(sh[i], static_cast<int64_t>(i));
  // The document index holds each sequence once per epoch (the epochs are shuffled together,
  // except a separate final epoch, which holds each sequence once on its own).
  const auto doc = ds->document_index();
  const int64_t E = ds->plan().num_epochs;
  std::vector<int32_t> all(doc.begin(), doc.end());
  std::sort(all.begin(), all.end());
  for (int64_t k = 0; k < 200 * E; ++k) ASSERT_EQ(all[static_cast<size_t>(k)], k / E);
  if (ds->plan().separate_final_epoch) {
    std::vector<int32_t> last(doc.end() - 200, doc.end());
    std::sort(last.begin(), last.end());
    for (int i = 0; i < 200; ++i) ASSERT_EQ(last[static_cast<size_t>(i)], i);
  }
  // Every sample is 14 tokens; consecutive (unshuffled) windows share exactly one token.
  std::vector<int64_t> inverse(sh.size());
  for (size_t i = 0; i < sh.size(); ++i)
    inverse[static_cast<size_t>(ds->shuffle_index()[i])] = static_cast<int64_t>(i);
  std::vector<int32_t> a(14), b(14);
  for (size_t j = 0; j + 1 < inverse.size(); ++j) {
    ds->get(inverse[j], a.data());
    ds->get(inverse[j + 1], b.data());
    ASSERT_EQ(a.back(), b.front()) << "window " << j;
  }
}

TEST(GPTDataset, ErrorsNameDatasetAndSplit) {
  ScratchDir dir;
  auto src = write_corpus(dir.file("small"), {1, 3, 2});
  GPTDatasetConfig cfg;
  cfg.seq_length = 8;
  expect_input_error(
      [&] {
        GPTDataset::build(src, 1, {2, 2}, cfg);
      },
      {dir.file("small"), "valid split", "empty"});
  // 6 tokens, one epoch (num_samples unset): no window of 9 tokens.
  expect_input_error(
      [&] {
        GPTDataset::build(src, 0, {0, 3}, cfg);
      },
      {dir.file("small"), "train split", "6 tokens", "seq_length + 1 = 9"});
  // A single 1-token sequence: Megatron asserts tokens_per_epoch > 1.
  cfg.num_samples = 4;
  expect_input_error(
      [&] {
        GPTDataset::build(src, 2, {0, 1}, cfg);
      },
      {dir.file("small"), "test split", "1 tokens"});
  // With num_samples, Megatron repeats the few tokens over many epochs: allowed.
  const auto ds = GPTDataset::build(src, 0, {0, 3}, cfg);
  EXPECT_GE(ds->num_samples(), 4);
  EXPECT_EQ(ds->plan().num_epochs, 6);  // 4 * 8 + 1 = 33 tokens from 6-token epochs
  expect_input_error([&] { GPTDataset::build(src, 0, {0, 4}, cfg); }, {"outside"});
  cfg.seed = uint64_t{1} << 32;
  expect_input_error([&] { GPTDataset::build(src, 0, {0, 3}, cfg); }, {"seed"});
}

struct CacheFixture {
  ScratchDir dir;
  std::shared_ptr<const SequenceSource> src;
  GPTDatasetConfig cfg;
  std::vector<std::string> logs;
  CacheFixture() {
    std::vector<int64_t> lengths;
    for (int i = 0; i < 120; ++i) lengths.push_back(2 + (i * 13) % 31);
    src = write_corpus(dir.file("corpus"), lengths);
    cfg.seq_length = 16;
    cfg.seed = 77;
    cfg.num_samples = 500;
    cfg.cache_dir = dir.file("cache");
    cfg.log = [this](const std::string& m) { logs.push_back(m); };
  }
  bool logged(const std::string& needle) const {
    for (const auto& l : logs)
      if (l.find(needle) != std::string::npos) return true;
    return false;
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(cfg.cache_dir)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path file_ending(const std::string& suffix) const {
    for (const auto& p : files())
      if (p.string().ends_with(suffix)) return p;
    return {};
  }
};

void expect_same_indices(const GPTDataset& a, const GPTDataset& b) {
  expect_same(a.document_index(), b.document_index(), "doc");
  expect_same(a.sample_index(), b.sample_index(), "sample");
  expect_same(a.shuffle_index(), b.shuffle_index(), "shuffle");
}

TEST(GPTDatasetCache, BuildThenLoad) {
  CacheFixture f;
  const DocumentRange r{0, 100};
  EXPECT_FALSE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg));
  int barriers = 0;
  const auto a = GPTDataset::build_or_load(f.src, 0, r, f.cfg, true, [&] { ++barriers; });
  EXPECT_EQ(barriers, 1);
  EXPECT_FALSE(a->loaded_from_cache());
  EXPECT_TRUE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg));
  const auto files = f.files();
  ASSERT_EQ(files.size(), 4u);  // three .npy and the description, no temporaries left
  for (const auto& p : files) EXPECT_EQ(p.string().find(".tmp"), std::string::npos) << p;
  EXPECT_TRUE(f.file_ending("-GPTDataset-train-document_index.npy").string().size() > 0);

  // The .npy header is numpy's own (v1.0, 64-byte aligned), so numpy.load reads the files.
  const auto bytes = testing::read_bytes(f.file_ending("-shuffle_index.npy").string());
  const std::string head(bytes.begin(), bytes.begin() + 128);
  EXPECT_EQ(head.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(head.find("{'descr': '<i8', 'fortran_order': False, 'shape': (" +
                      std::to_string(a->num_samples()) + ",), }"),
            std::string::npos);
  const size_t hlen = bytes[8] | (bytes[9] << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(bytes.size(), 10 + hlen + 8 * static_cast<size_t>(a->num_samples()));

  // Builder and non-builder both load it now.
  const auto b = GPTDataset::build_or_load(f.src, 0, r, f.cfg, true, [&] { ++barriers; });
  const auto c = GPTDataset::build_or_load(f.src, 0, r, f.cfg, false, [&] { ++barriers; });
  EXPECT_EQ(barriers, 3);
  EXPECT_TRUE(b->loaded_from_cache());
  EXPECT_TRUE(c->loaded_from_cache());
  expect_same_indices(*a, *b);
  expect_same_indices(*a, *c);
  std::vector<int32_t> x(17), y(17);
  for (int64_t i = 0; i < a->num_samples(); i += 7) {
    a->get(i, x.data());
    c->get(i, y.data());
    ASSERT_EQ(x, y);
  }
  EXPECT_FALSE(f.logged("warning"));

  // Other parameters -> other files, side by side.
  auto cfg2 = f.cfg;
  cfg2.seed = 78;
  EXPECT_FALSE(GPTDataset::cache_exists(*f.src, 0, r, cfg2));
  GPTDataset::build_or_load(f.src, 0, r, cfg2);
  GPTDataset::build_or_load(f.src, 1, {100, 120}, f.cfg);
  EXPECT_EQ(f.files().size(), 12u);
}

TEST(GPTDatasetCache, CorruptOrTruncatedFilesAreRebuiltWithAWarning) {
  CacheFixture f;
  const DocumentRange r{0, 100};
  const auto ref = GPTDataset::build(f.src, 0, r, f.cfg);
  for (const char* victim :
       {"-sample_index.npy", "-shuffle_index.npy", "-document_index.npy", "-description.json"}) {
    for (int mode = 0; mode < 3; ++mode) {
      GPTDataset::build_or_load(f.src, 0, r, f.cfg);
      ASSERT_TRUE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg));
      const std::string path = f.file_ending(victim).string();
      auto bytes = testing::read_bytes(path);
      if (mode == 0) bytes[bytes.size() - 3] ^= 0x40;  // flip a bit of the data
      if (mode == 1) bytes.resize(bytes.size() - 8);   // truncate
      if (mode == 2) bytes[12] ^= 0x01;                // damage the header / the JSON
      testing::write_bytes(path, bytes);
      EXPECT_FALSE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg)) << victim << " mode " << mode;
      f.logs.clear();
      // A non-builder rebuilds locally with a warning; the builder rebuilds and rewrites.
      const auto c = GPTDataset::build_or_load(f.src, 0, r, f.cfg, false);
      EXPECT_FALSE(c->loaded_from_cache());
      EXPECT_TRUE(f.logged("warning")) << victim << " mode " << mode;
      expect_same_indices(*ref, *c);
      f.logs.clear();
      const auto b = GPTDataset::build_or_load(f.src, 0, r, f.cfg, true);
      EXPECT_FALSE(b->loaded_from_cache());
      EXPECT_TRUE(f.logged("warning: rebuilding")) << victim << " mode " << mode;
      expect_same_indices(*ref, *b);
      EXPECT_TRUE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg));
    }
  }
}

TEST(GPTDatasetCache, ChangedDataInvalidatesTheCache) {
  CacheFixture f;
  const DocumentRange r{0, 100};
  GPTDataset::build_or_load(f.src, 0, r, f.cfg);
  ASSERT_TRUE(GPTDataset::cache_exists(*f.src, 0, r, f.cfg));
  // Rewrite the corpus at the same path with other lengths: the key (lengths hash) changes.
  std::vector<int64_t> lengths;
  for (int i = 0; i < 120; ++i) lengths.push_back(3 + (i * 7) % 29);
  auto src2 = write_corpus(f.dir.file("corpus"), lengths);
  EXPECT_FALSE(GPTDataset::cache_exists(*src2, 0, r, f.cfg));
  const auto ds = GPTDataset::build_or_load(src2, 0, r, f.cfg);
  EXPECT_FALSE(ds->loaded_from_cache());
  expect_same_indices(*ds, *GPTDataset::build(src2, 0, r, f.cfg));
}

TEST(GPTDatasetCache, NonBuilderWithoutCacheAndUnwritableDirectory) {
  CacheFixture f;
  const DocumentRange r{0, 100};
  const auto ref = GPTDataset::build(f.src, 0, r, f.cfg);
  const auto c = GPTDataset::build_or_load(f.src, 0, r, f.cfg, false);
  EXPECT_TRUE(f.logged("warning: building the GPTDataset indices"));
  expect_same_indices(*ref, *c);

  auto cfg = f.cfg;
  testing::write_text(f.dir.file("plainfile"), "x");
  cfg.cache_dir = f.dir.file("plainfile") + "/sub";  // cannot be created
  f.logs.clear();
  const auto b = GPTDataset::build_or_load(f.src, 0, r, cfg, true);
  EXPECT_TRUE(f.logged("could not save"));
  expect_same_indices(*ref, *b);
}

TEST(GPTDatasetCache, DefaultDirectoryIsMegatrons) {
  CacheFixture f;
  auto cfg = f.cfg;
  cfg.cache_dir.clear();
  EXPECT_EQ(GPTDataset::cache_directory(*f.src, cfg),
            (fs::path(f.dir.file("corpus")) / "cache" / "GPTDataset_indices").string());
  GPTDataset::build_or_load(f.src, 0, {0, 100}, cfg);
  EXPECT_TRUE(fs::is_directory(fs::path(f.dir.file("corpus")) / "cache" / "GPTDataset_indices"));
  EXPECT_TRUE(GPTDataset::cache_exists(*f.src, 0, {0, 100}, cfg));
}

TEST(MockGPTDataset, DeterministicAndNeverCached) {
  MockSequenceSource::Spec spec;
  spec.num_sequences = 500;
  spec.max_length = 40;
  spec.vocab_size = 1000;
  spec.eod = 999;
  spec.seed = 3;
  auto a = std::make_shared<MockSequenceSource>(spec);
  auto b = std::make_shared<MockSequenceSource>(spec);
  for (int64_t i = 0; i < 500; ++i) {
    ASSERT_EQ(a->sequence_length(i), b->sequence_length(i));
    ASSERT_GE(a->sequence_length(i), 1);
    ASSERT_LE(a->sequence_length(i), 40);
    int32_t last = -1;
    a->read(i, a->sequence_length(i) - 1, 1, &last);
    ASSERT_EQ(last, 999);
  }
  spec.seed = 4;
  MockSequenceSource other(spec);
  bool differs = false;
  for (int64_t i = 0; i < 500; ++i) differs |= other.sequence_length(i) != a->sequence_length(i);
  EXPECT_TRUE(differs);

  GPTDatasetConfig cfg;
  cfg.seq_length = 32;
  cfg.num_samples = 2000;
  cfg.cache_dir = "/nonexistent/never/used";
  EXPECT_EQ(GPTDataset::cache_directory(*a, cfg), "");
  int barriers = 0;
  const auto ds = GPTDataset::build_or_load(a, 0, {0, 450}, cfg, true, [&] { ++barriers; });
  EXPECT_EQ(barriers, 1);
  EXPECT_FALSE(ds->loaded_from_cache());
  const auto ds2 = GPTDataset::build(b, 0, {0, 450}, cfg);
  expect_same_indices(*ds, *ds2);
  std::vector<int32_t> x(33), y(33);
  ds->get(1999, x.data());
  ds2->get(1999, y.data());
  EXPECT_EQ(x, y);
}

TEST(GPTDataset, ConcurrentGetIsSafe) {
  MockSequenceSource::Spec spec;
  spec.num_sequences = 300;
  spec.max_length = 50;
  auto src = std::make_shared<MockSequenceSource>(spec);
  GPTDatasetConfig cfg;
  cfg.seq_length = 20;
  const auto ds = GPTDataset::build(src, 0, {0, 300}, cfg);
  std::vector<std::vector<int32_t>> ref(static_cast<size_t>(ds->num_samples()),
                                        std::vector<int32_t>(21));
  for (int64_t i = 0; i < ds->num_samples(); ++i) ds->get(i, ref[static_cast<size_t>(i)].data());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<int32_t> buf(21);
      for (int64_t i = t; i < ds->num_samples(); i += 4) {
        ds->get(i, buf.data());
        if (buf != ref[static_cast<size_t>(i)]) ++bad;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace megatron::data
