// BlendedDataset and build_gpt_datasets against Megatron's blending rule and builder sizes
// (tests/fixtures/data/gpt_dataset.json, made by tools/gen_gpt_dataset_fixture.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/blended_dataset.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

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

std::shared_ptr<const SequenceSource> write_corpus(const std::string& prefix,
                                                   const std::vector<int64_t>& lengths,
                                                   int corpus) {
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

// A fixed-size dataset whose sample i is [tag, i, i, ...].
class TaggedDataset final : public SampleDataset {
 public:
  TaggedDataset(int32_t tag, int64_t n, int64_t seq = 3) : tag_(tag), n_(n), seq_(seq) {}
  int64_t num_samples() const override { return n_; }
  int64_t seq_length() const override { return seq_; }
  void get(int64_t index, int32_t* out) const override {
    MT_CHECK(index >= 0 && index < n_, "index");
    out[0] = tag_;
    for (int64_t k = 1; k <= seq_; ++k) out[k] = static_cast<int32_t>(index);
  }
  std::string describe() const override { return concat("tagged ", tag_); }

 private:
  int32_t tag_;
  int64_t n_, seq_;
};

TEST(Blending, HandComputedCase) {
  // w = [0.5, 0.3, 0.2]; error_d = w_d * max(i, 1) - drawn_d, largest wins, first on ties.
  //  i=0 (x=1): 0.5, 0.3, 0.2          -> 0, drawn [1,0,0]
  //  i=1 (x=1): -0.5, 0.3, 0.2         -> 1, drawn [1,1,0]
  //  i=2 (x=2): 0, -0.4, 0.4           -> 2, drawn [1,1,1]
  //  i=3 (x=3): 0.5, -0.1, -0.4        -> 0, drawn [2,1,1]
  //  i=4 (x=4): 0, 0.2, -0.2           -> 1
  const std::vector<double> w{0.5, 0.3, 0.2};
  std::vector<int16_t> di(5);
  std::vector<int64_t> dsi(5);
  build_blending_indices(w, 5, di, dsi);
  EXPECT_EQ(di, (std::vector<int16_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(dsi, (std::vector<int64_t>{0, 0, 0, 1, 1}));
  // Equal weights: ties go to the lowest index. i=1: errors -2/3, 1/3, 1/3 -> 1.
  const std::vector<double> eq{1.0 / 3, 1.0 / 3, 1.0 / 3};
  std::vector<int16_t> di3(4);
  std::vector<int64_t> dsi3(4);
  build_blending_indices(eq, 4, di3, dsi3);
  EXPECT_EQ(di3, (std::vector<int16_t>{0, 1, 2, 0}));
}

TEST(Blending, MatchesMegatronFixture) {
  int n = 0;
  for (const json& c : fixture()["blending_cases"]) {
    const auto raw = c["weights"].get<std::vector<double>>();
    const auto w = normalize_weights(raw);
    const auto hex = c["normalized"].get<std::vector<std::string>>();
    ASSERT_EQ(w.size(), hex.size());
    for (size_t d = 0; d < w.size(); ++d) EXPECT_EQ(w[d], std::strtod(hex[d].c_str(), nullptr));
    const int64_t size = c["size"].get<int64_t>();
    std::vector<int16_t> di(static_cast<size_t>(size));
    std::vector<int64_t> dsi(static_cast<size_t>(size));
    build_blending_indices(w, size, di, dsi);
    const auto want_di = c["dataset_index"].get<std::vector<int>>();
    const auto want_dsi = c["dataset_sample_index"].get<std::vector<int64_t>>();
    for (size_t i = 0; i < di.size(); ++i) {
      ASSERT_EQ(di[i], want_di[i]) << i;
      ASSERT_EQ(dsi[i], want_dsi[i]) << i;
    }
    ++n;
  }
  EXPECT_EQ(n, 5);
}

TEST(Blending, SizesPerDataset) {
  const std::vector<double> w = normalize_weights(std::vector<double>{3, 5, 2});
  // ceil(200 * 0.3) = 60 -> ceil(60 * 1.005) = ceil(60.3) = 61; 100 -> 101 (100.5); 40 -> 41.
  EXPECT_EQ(blend_sizes_per_dataset(w, 200, 0.005), (std::vector<int64_t>{61, 101, 41}));
  EXPECT_EQ(blend_sizes_per_dataset(w, 200, 0.0), (std::vector<int64_t>{60, 100, 40}));
  EXPECT_EQ(blend_sizes_per_dataset(w, 0, 0.005), (std::vector<int64_t>{0, 0, 0}));
}

TEST(BlendedDataset, GetRoutesAndValidates) {
  std::vector<std::shared_ptr<const SampleDataset>> parts{std::make_shared<TaggedDataset>(7, 100),
                                                          std::make_shared<TaggedDataset>(8, 100)};
  BlendedDataset b(parts, {1.0, 3.0}, 40);
  EXPECT_EQ(b.num_samples(), 40);
  EXPECT_EQ(b.seq_length(), 3);
  std::vector<int32_t> buf(4);
  int64_t seen[2] = {0, 0};
  for (int64_t i = 0; i < 40; ++i) {
    b.get(i, buf.data());
    const int d = buf[0] - 7;
    ASSERT_EQ(d, b.dataset_index()[static_cast<size_t>(i)]);
    ASSERT_EQ(buf[1], seen[d]++);  // each dataset's samples in order
  }
  EXPECT_EQ(seen[0], 10);
  EXPECT_EQ(seen[1], 30);
  EXPECT_THROW(b.get(40, buf.data()), Error);

  expect_input_error([&] { BlendedDataset(parts, {1.0, 0.0}, 10); }, {"tagged 8", "weight"});
  expect_input_error([&] { BlendedDataset(parts, {1.0}, 10); }, {"2 datasets but 1 weights"});
  std::vector<std::shared_ptr<const SampleDataset>> small{std::make_shared<TaggedDataset>(1, 100),
                                                          std::make_shared<TaggedDataset>(2, 5)};
  expect_input_error(
      [&] {
        BlendedDataset(small, {0.5, 0.5}, 40);
      },
      {"draws 20 samples from tagged 2", "only 5"});
  std::vector<std::shared_ptr<const SampleDataset>> mixed{std::make_shared<TaggedDataset>(1, 9, 3),
                                                          std::make_shared<TaggedDataset>(2, 9, 4)};
  expect_input_error([&] { BlendedDataset(mixed, {0.5, 0.5}, 4); }, {"seq_length"});
}

TEST(BuildGPTDatasets, MatchesMegatronBuilderFixture) {
  ScratchDir dir;
  const json& b = fixture()["builder"];
  const auto corpora = b["corpora"].get<std::vector<std::vector<int64_t>>>();
  const auto raw = b["weights"].get<std::vector<double>>();
  GPTDatasetsSpec spec;
  for (size_t d = 0; d < corpora.size(); ++d) {
    const std::string prefix = dir.file("corpus" + std::to_string(d));
    write_corpus(prefix, corpora[d], static_cast<int>(d));
    spec.paths_weights.emplace_back(prefix, raw[d]);
  }
  spec.split = b["split"].get<std::string>();
  spec.seq_length = b["seq_length"].get<int64_t>();
  spec.seed = b["seed"].get<uint64_t>();
  const auto ns = b["num_samples"].get<std::vector<int64_t>>();
  spec.num_samples = {ns[0], ns[1], ns[2]};
  spec.cache_dir = dir.file("cache");
  int barriers = 0;
  spec.barrier = [&] { ++barriers; };
  spec.log = [](const std::string&) {};
  for (int round = 0; round < 2; ++round) {  // built, then loaded from the cache
    const GPTDatasets got = build_gpt_datasets(spec);
    EXPECT_EQ(barriers, 9 * (round + 1));
    for (int s = 0; s < 3; ++s) {
      const json& want = b["splits"][static_cast<size_t>(s)];
      const auto* blended =
          dynamic_cast<const BlendedDataset*>(got.splits[static_cast<size_t>(s)].get());
      ASSERT_NE(blended, nullptr);
      ASSERT_EQ(blended->num_samples(), want["size"].get<int64_t>());
      for (size_t d = 0; d < 3; ++d) {
        const auto* g = dynamic_cast<const GPTDataset*>(blended->datasets()[d].get());
        ASSERT_NE(g, nullptr);
        EXPECT_EQ(g->loaded_from_cache(), round == 1);
        EXPECT_EQ(g->sequences().begin, want["sequence_ranges"][d][0].get<int64_t>());
        EXPECT_EQ(g->sequences().end, want["sequence_ranges"][d][1].get<int64_t>());
        EXPECT_EQ(*g->num_samples_requested(), want["per_dataset_num_samples"][d].get<int64_t>());
        EXPECT_EQ(g->num_samples(), want["per_dataset_total"][d].get<int64_t>());
      }
      const auto di = want["dataset_index"].get<std::vector<int>>();
      const auto dsi = want["dataset_sample_index"].get<std::vector<int64_t>>();
      for (size_t i = 0; i < di.size(); ++i) {
        ASSERT_EQ(blended->dataset_index()[i], di[i]) << s << " " << i;
        ASSERT_EQ(blended->dataset_sample_index()[i], dsi[i]) << s << " " << i;
      }
      const auto samples = want["samples"].get<std::vector<std::vector<int32_t>>>();
      std::vector<int32_t> buf(static_cast<size_t>(spec.seq_length + 1));
      for (size_t i = 0; i < samples.size(); ++i) {
        blended->get(static_cast<int64_t>(i), buf.data());
        ASSERT_EQ(buf, samples[i]) << "split " << s << " sample " << i;
      }
    }
  }
}

TEST(BuildGPTDatasets, SinglePathIsAPlainGPTDataset) {
  ScratchDir dir;
  std::vector<int64_t> lengths;
  for (int i = 0; i < 100; ++i) lengths.push_back(5 + (i * 11) % 17);
  auto src = write_corpus(dir.file("c"), lengths, 0);
  GPTDatasetsSpec spec;
  spec.paths_weights = {{dir.file("c"), 0.7}};
  spec.split = "8,2,0";
  spec.seq_length = 10;
  spec.num_samples = {300, 20, 5};
  spec.log = [](const std::string&) {};
  spec.cache_dir = dir.file("cache");
  const GPTDatasets got = build_gpt_datasets(spec);
  ASSERT_NE(got.train(), nullptr);
  ASSERT_NE(got.valid(), nullptr);
  EXPECT_EQ(got.test(), nullptr);  // zero share of the split string
  const auto* g = dynamic_cast<const GPTDataset*>(got.train().get());
  ASSERT_NE(g, nullptr);
  GPTDatasetConfig cfg;
  cfg.seq_length = 10;
  cfg.num_samples = 300;
  const auto ref = GPTDataset::build(src, 0, {0, 80}, cfg);
  ASSERT_EQ(g->num_samples(), ref->num_samples());
  std::vector<int32_t> x(11), y(11);
  for (int64_t i = 0; i < ref->num_samples(); ++i) {
    g->get(i, x.data());
    ref->get(i, y.data());
    ASSERT_EQ(x, y);
  }
  spec.num_samples = {300, 0, 5};
  EXPECT_EQ(build_gpt_datasets(spec).valid(), nullptr);  // nothing asked, nothing built
}

TEST(BuildGPTDatasets, Errors) {
  ScratchDir dir;
  write_corpus(dir.file("few"), {10, 10, 10, 10, 10}, 0);
  write_corpus(dir.file("more"), std::vector<int64_t>(200, 9), 1);
  GPTDatasetsSpec spec;
  spec.seq_length = 4;
  spec.num_samples = {10, 10, 10};
  spec.log = [](const std::string&) {};
  spec.cache_dir = dir.file("cache");
  expect_input_error([&] { build_gpt_datasets(spec); }, {"no training data"});
  spec.paths_weights = {{dir.file("more"), 1.0}, {dir.file("few"), 1.0}};
  spec.split = "969,30,1";
  expect_input_error([&] { build_gpt_datasets(spec); },
                     {dir.file("few"), "'969,30,1'", "valid split empty", "train [0, 5)",
                      "valid [5, 5)", "test [5, 5)"});
  spec.split = "1";
  spec.paths_weights[1].second = -1.0;
  expect_input_error([&] { build_gpt_datasets(spec); }, {dir.file("few"), "weight -1"});
  spec.paths_weights[1].second = 1.0;
  spec.num_samples = {10, 10, 10};
  const auto ok = build_gpt_datasets(spec);
  EXPECT_NE(ok.train(), nullptr);
  EXPECT_EQ(ok.valid(), nullptr);
  spec.paths_weights = {{dir.file("missing"), 1.0}};
  expect_input_error([&] { build_gpt_datasets(spec); }, {dir.file("missing")});
}

TEST(BuildGPTDatasets, MockSources) {
  MockSequenceSource::Spec a, b;
  a.num_sequences = 300;
  a.max_length = 64;
  a.seed = 1;
  b = a;
  b.seed = 2;
  GPTDatasetsSpec spec;
  spec.paths_weights = {{"mock-a", 2.0}, {"mock-b", 1.0}};
  spec.split = "90,10,0";
  spec.seq_length = 32;
  spec.num_samples = {500, 30, 0};
  spec.log = [](const std::string&) {};
  const std::vector<std::shared_ptr<const SequenceSource>> sources{
      std::make_shared<MockSequenceSource>(a), std::make_shared<MockSequenceSource>(b)};
  const auto got = build_gpt_datasets(spec, sources);
  ASSERT_NE(got.train(), nullptr);
  // ceil(500 * 2/3) + ceil(500 * 1/3) = 334 + 167
  EXPECT_EQ(got.train()->num_samples(), 501);
  EXPECT_EQ(got.valid()->num_samples(), 30);
  EXPECT_EQ(got.test(), nullptr);
}

}  // namespace
}  // namespace megatron::data
