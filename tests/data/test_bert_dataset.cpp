// BERTDataset (data/bert_dataset.h) on part of the shipped corpus, split into sentences and
// tokenized with the real bert-base-uncased vocabulary: the layout of every sample, segments and
// the NSP label, masking statistics, short sequences, determinism, epochs and errors; and
// inspect_data --dataset-type bert. The sentence splitter, preprocess_data --split-sentences and
// small synthetic datasets (Megatron parity): test_bert_dataset_sentences.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "data/bert_dataset.h"
#include "data/gpt_dataset.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/support/bert_dataset_test_util.h"

namespace megatron::data {
namespace {

using testing::bert_info;
using testing::expect_input_error;
using testing::kSource;
using testing::kVocab;
using testing::quiet;
using testing::run_tool;
using testing::ScratchDir;

// ---- a sentence dataset from the shipped corpus ---------------------------------------------

class BertCorpus : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("megatron_bert_test_" + std::to_string(::getpid())));
    std::filesystem::create_directories(*dir_);
    // The first 80 Austen chapters and 250 KJV chapters (2.2 MB, ~4000 samples of 128).
    const std::string subset = (*dir_ / "subset.jsonl").string();
    std::ofstream out(subset);
    for (const auto& [file, lines] : {std::pair{"austen.jsonl", 80}, std::pair{"kjv.jsonl", 250}}) {
      std::ifstream in(kSource + "/data/corpus/" + file);
      std::string line;
      for (int k = 0; k < lines && std::getline(in, line); ++k) out << line << "\n";
    }
    out.close();
    PreprocessOptions opt;
    opt.inputs = {subset};
    opt.output_prefix = (*dir_ / "corpus").string();
    opt.tokenizer = {config::TokenizerType::BertWordPieceLowerCase, kVocab, "", ""};
    opt.split_sentences = true;
    opt.workers = 2;
    const auto stats = preprocess_jsonl(opt);
    dataset_ = new std::shared_ptr<const IndexedDataset>(
        std::make_shared<IndexedDataset>(stats.output_prefixes[0]));
  }
  static void TearDownTestSuite() {
    delete dataset_;
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
  }
  static std::shared_ptr<const IndexedDataset> dataset() { return *dataset_; }
  static std::shared_ptr<BERTDataset> build(BERTDatasetConfig cfg, int split_id = 0,
                                            const std::string& split = "969,30,1") {
    cfg.log = quiet;
    const auto range = split_document_ranges(split, dataset()->num_documents());
    return BERTDataset::build(dataset(), split_id, range[static_cast<size_t>(split_id)],
                              bert_info(), cfg);
  }
  static BERTDatasetConfig config(int64_t seq_length = 128) {
    BERTDatasetConfig cfg;
    cfg.seq_length = seq_length;
    return cfg;
  }

  static std::filesystem::path* dir_;
  static std::shared_ptr<const IndexedDataset>* dataset_;
};
std::filesystem::path* BertCorpus::dir_ = nullptr;
std::shared_ptr<const IndexedDataset>* BertCorpus::dataset_ = nullptr;

// The unmasked tokens: the label where there is one.
std::vector<int32_t> originals(const BertSample& s) {
  std::vector<int32_t> o = s.tokens;
  for (size_t i = 0; i < o.size(); ++i)
    if (s.labels[i] != kBertIgnoreLabel) o[i] = s.labels[i];
  return o;
}

int64_t real_length(const BertSample& s) {
  return std::count(s.padding_mask.begin(), s.padding_mask.end(), uint8_t{1});
}

TEST_F(BertCorpus, LayoutOfEverySample) {
  const auto bert = build(config());
  const auto& info = bert_info();
  ASSERT_GT(bert->num_samples(), 2000);
  EXPECT_EQ(bert->num_epochs(), 1);
  const int64_t S = 128;
  for (int64_t i = 0; i < 2000; ++i) {
    SCOPED_TRACE(i);
    const BertSample s = bert->get(i);
    ASSERT_EQ(static_cast<int64_t>(s.tokens.size()), S);
    ASSERT_EQ(static_cast<int64_t>(s.token_types.size()), S);
    ASSERT_EQ(static_cast<int64_t>(s.labels.size()), S);
    ASSERT_EQ(static_cast<int64_t>(s.padding_mask.size()), S);
    const int64_t n = real_length(s);
    // Padding mask: ones then zeros.
    for (int64_t t = 0; t < S; ++t) ASSERT_EQ(s.padding_mask[t], t < n ? 1 : 0);
    ASSERT_LE(n, bert->sample_range(i).target_length + 3);
    const auto o = originals(s);
    // [CLS] A [SEP] B [SEP]: A and B non-empty, [CLS]/[SEP] only there.
    ASSERT_EQ(o[0], info.cls);
    ASSERT_EQ(o[n - 1], info.sep);
    std::vector<int64_t> seps;
    for (int64_t t = 0; t < n; ++t) {
      if (o[t] == info.sep) seps.push_back(t);
      if (t > 0) {
        ASSERT_NE(o[t], info.cls);
      }
    }
    ASSERT_EQ(seps.size(), 2u);
    ASSERT_GT(seps[0], 1);
    ASSERT_GT(seps[1], seps[0] + 1);
    // Token types: 0 through the first [SEP], 1 through the last, 0 on padding.
    for (int64_t t = 0; t < S; ++t)
      ASSERT_EQ(s.token_types[t], (t > seps[0] && t < n) ? 1 : 0) << "position " << t;
    // Padding: pad ids, no labels. Special tokens are never masked.
    for (int64_t t = n; t < S; ++t) {
      ASSERT_EQ(s.tokens[t], info.pad);
      ASSERT_EQ(s.labels[t], kBertIgnoreLabel);
    }
    ASSERT_EQ(s.tokens[0], info.cls);
    ASSERT_EQ(s.labels[0], kBertIgnoreLabel);
    ASSERT_EQ(s.tokens[seps[0]], info.sep);
    ASSERT_EQ(s.tokens[seps[1]], info.sep);
    ASSERT_EQ(s.labels[seps[0]], kBertIgnoreLabel);
    ASSERT_EQ(s.labels[seps[1]], kBertIgnoreLabel);
  }
}

TEST_F(BertCorpus, SegmentsComeFromTheSentencesAndNspLabelMeansSwapped) {
  const auto bert = build(config());
  const auto& info = bert_info();
  int64_t random = 0, checked_exact = 0, truncated = 0;
  const int64_t n_samples = 2000;
  for (int64_t i = 0; i < n_samples; ++i) {
    SCOPED_TRACE(i);
    const BertSample s = bert->get(i);
    const auto o = originals(s);
    const int64_t n = real_length(s);
    const auto sep = std::find(o.begin() + 1, o.begin() + n, info.sep) - o.begin();
    const std::vector<int32_t> a(o.begin() + 1, o.begin() + sep);
    const std::vector<int32_t> b(o.begin() + sep + 1, o.begin() + n - 1);
    std::vector<int32_t> text;  // the sample's sentences, in document order
    const auto& r = bert->sample_range(i);
    for (int64_t q = r.begin; q < r.end; ++q) {
      const auto v = dataset()->read(q);
      text.insert(text.end(), v.begin(), v.end());
    }
    random += s.is_random;
    truncated += s.truncated;
    const auto& first = s.is_random ? b : a;
    const auto& second = s.is_random ? a : b;
    if (!s.truncated) {
      // Untruncated: first + second is exactly the text.
      std::vector<int32_t> joined = first;
      joined.insert(joined.end(), second.begin(), second.end());
      ASSERT_EQ(joined, text);
      ++checked_exact;
    } else {
      // Truncated: each is a contiguous piece of the text, `first` ending before `second`.
      const auto f = std::search(text.begin(), text.end(), first.begin(), first.end());
      ASSERT_NE(f, text.end());
      const auto g = std::search(f + static_cast<std::ptrdiff_t>(first.size()), text.end(),
                                 second.begin(), second.end());
      ASSERT_NE(g, text.end());
      ASSERT_LE(static_cast<int64_t>(a.size() + b.size()), r.target_length);
    }
  }
  EXPECT_GT(checked_exact, 100);
  EXPECT_GT(truncated, 200);
  // NSP balance.
  EXPECT_NEAR(static_cast<double>(random) / n_samples, 0.5, 0.04) << random;
}

TEST_F(BertCorpus, MaskingRateWholeWordsAnd801010) {
  const auto bert = build(config());
  const auto& info = bert_info();
  int64_t real = 0, masked = 0, as_mask = 0, kept = 0, replaced = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    SCOPED_TRACE(i);
    const BertSample s = bert->get(i);
    const auto o = originals(s);
    const int64_t n = real_length(s);
    real += n;
    const auto is_masked = [&](int64_t t) { return s.labels[t] != kBertIgnoreLabel; };
    const auto special = [&](int64_t t) { return o[t] == info.cls || o[t] == info.sep; };
    const auto continuation = [&](int64_t t) { return info.is_continuation[o[t]] != 0; };
    for (int64_t t = 0; t < n; ++t) {
      if (!is_masked(t)) {
        ASSERT_EQ(s.tokens[t], o[t]);  // unmasked positions are the original tokens
        continue;
      }
      ++masked;
      ASSERT_FALSE(special(t));
      if (s.tokens[t] == info.mask)
        ++as_mask;
      else if (s.tokens[t] == s.labels[t])
        ++kept;
      else
        ++replaced;
      // Whole words: the pieces on either side that belong to the same word are masked too.
      if (t + 1 < n && !special(t + 1) && continuation(t + 1)) {
        ASSERT_TRUE(is_masked(t + 1)) << t;
      }
      if (continuation(t) && t > 0 && !special(t - 1)) {
        ASSERT_TRUE(is_masked(t - 1)) << t;
      }
    }
  }
  const double rate = static_cast<double>(masked) / static_cast<double>(real);
  // At most 15% of the tokens ([CLS]/[SEP] counted, as Megatron); whole words that would
  // overshoot are skipped, so a little less on average.
  EXPECT_GT(rate, 0.125);
  EXPECT_LE(rate, 0.152);
  const auto frac = [&](int64_t k) { return static_cast<double>(k) / static_cast<double>(masked); };
  EXPECT_NEAR(frac(as_mask), 0.8, 0.015);
  EXPECT_NEAR(frac(kept), 0.1, 0.015);
  EXPECT_NEAR(frac(replaced), 0.1, 0.015);
}

TEST_F(BertCorpus, PlainWholeWordMaskingWithoutNgrams) {
  auto cfg = config(64);
  cfg.masking_max_ngram = 1;
  const auto bert = build(cfg);
  const auto& info = bert_info();
  int64_t real = 0, masked = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const BertSample s = bert->get(i);
    const auto o = originals(s);
    const int64_t n = real_length(s);
    real += n;
    for (int64_t t = 0; t < n; ++t) {
      if (s.labels[t] == kBertIgnoreLabel) continue;
      ++masked;
      // Whole words: a masked piece's "##" continuations are masked too.
      if (t + 1 < n && o[t + 1] != info.sep && info.is_continuation[o[t + 1]]) {
        ASSERT_NE(s.labels[t + 1], kBertIgnoreLabel);
      }
      if (t > 0 && o[t - 1] != info.sep && o[t - 1] != info.cls && info.is_continuation[o[t]]) {
        ASSERT_NE(s.labels[t - 1], kBertIgnoreLabel);
      }
    }
  }
  EXPECT_NEAR(static_cast<double>(masked) / static_cast<double>(real), 0.14, 0.02);
}

TEST_F(BertCorpus, ShortSequencesFollowShortSeqProb) {
  for (const double p : {0.0, 0.1, 0.5}) {
    SCOPED_TRACE(p);
    auto cfg = config();
    cfg.short_seq_probability = p;
    const auto bert = build(cfg);
    int64_t short_targets = 0, short_samples = 0;
    for (int64_t i = 0; i < bert->num_samples(); ++i) {
      const auto& r = bert->sample_range(i);
      ASSERT_GE(r.target_length, 2);
      ASSERT_LE(r.target_length, 125);
      short_targets += r.target_length < 125;
    }
    for (int64_t i = 0; i < 500; ++i) short_samples += real_length(bert->get(i)) < 64;
    const double frac =
        static_cast<double>(short_targets) / static_cast<double>(bert->num_samples());
    if (p == 0) {
      EXPECT_EQ(short_targets, 0);
    } else {
      // A short target ends its sample early, so short targets are a bit over-represented.
      EXPECT_GT(frac, p * 0.7);
      EXPECT_LT(frac, p * 1.6 + 0.02);
      EXPECT_GT(short_samples, 0);
    }
  }
}

TEST_F(BertCorpus, DeterministicAndIndependentOfAccessOrder) {
  const auto a = build(config());
  const auto b = build(config());
  ASSERT_EQ(a->num_samples(), b->num_samples());
  const std::vector<int64_t> picks = {0, 1, 7, 500, a->num_samples() - 1};
  std::vector<BertSample> first;
  for (const int64_t i : picks) first.push_back(a->get(i));
  // Reverse order, another instance, several threads: the same samples.
  for (size_t k = picks.size(); k-- > 0;) {
    const BertSample s = b->get(picks[k]);
    EXPECT_EQ(s.tokens, first[k].tokens);
    EXPECT_EQ(s.labels, first[k].labels);
    EXPECT_EQ(s.token_types, first[k].token_types);
    EXPECT_EQ(s.is_random, first[k].is_random);
  }
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 1);
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t k = 0; k < picks.size(); ++k)
          if (a->get(picks[(k + static_cast<size_t>(th)) % picks.size()]).tokens !=
              first[(k + static_cast<size_t>(th)) % picks.size()].tokens)
            ok[static_cast<size_t>(th)] = 0;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
  // Samples differ from one another, and a different seed gives other samples.
  EXPECT_NE(first[0].tokens, first[1].tokens);
  auto cfg = config();
  cfg.seed = 99;
  const auto c = build(cfg);
  EXPECT_NE(c->get(0).tokens, first[0].tokens);
}

TEST_F(BertCorpus, EpochsForRequestedSamplesAndNoBinaryHead) {
  const auto one = build(config());
  auto cfg = config();
  cfg.num_samples = one->num_samples() + 10;
  const auto two = build(cfg);
  EXPECT_EQ(two->num_epochs(), 2);
  EXPECT_GE(two->num_samples(), *cfg.num_samples);
  // Each sentence range appears twice (targets redrawn per epoch, so not exactly the same set).
  EXPECT_NEAR(static_cast<double>(two->num_samples()) / static_cast<double>(one->num_samples()),
              2.0, 0.05);

  cfg = config(64);
  cfg.binary_head = false;
  const auto bert = build(cfg);
  const auto& info = bert_info();
  for (int64_t i = 0; i < 300; ++i) {
    const BertSample s = bert->get(i);
    const auto o = originals(s);
    const int64_t n = real_length(s);
    EXPECT_EQ(s.is_random, 0);
    EXPECT_EQ(std::count(o.begin(), o.begin() + n, info.sep), 1);
    EXPECT_EQ(o[n - 1], info.sep);
    EXPECT_EQ(std::count(s.token_types.begin(), s.token_types.end(), 1), 0);
  }
}

TEST_F(BertCorpus, Errors) {
  auto cfg = config();
  cfg.seed = 0;
  expect_input_error([&] { build(cfg); }, {"seed", "train split"});
  cfg = config(4);
  expect_input_error([&] { build(cfg); }, {"seq_length must be >= 5"});
  cfg = config();
  cfg.log = quiet;
  const auto byte_tok = make_tokenizer({config::TokenizerType::Byte, "", "", ""});
  expect_input_error([&] { BertTokenInfo::from_tokenizer(*byte_tok); }, {"WordPiece"});
  expect_input_error(
      [&] {
        BERTDataset::build(dataset(), 0, {5, 5}, bert_info(), cfg);
      },
      {"empty"});
}

// ---- inspect_data --dataset-type bert --------------------------------------------------------

TEST_F(BertCorpus, InspectDataShowsASample) {
  ScratchDir dir;
  const auto r =
      run_tool(dir, "inspect_data",
               "--data-path '" + dataset()->prefix() +
                   "' --dataset-type bert --sample 5 --seq-length 64 --seed 7 " +
                   "--tokenizer-type BertWordPieceLowerCase --vocab-file '" + kVocab + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto cfg = config(64);
  cfg.seed = 7;
  const auto bert = build(cfg);
  const BertSample s = bert->get(5);
  EXPECT_NE(r.out.find("over documents"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NSP label (is_random): " + std::to_string(s.is_random)), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("[CLS]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[MASK]"), std::string::npos) << r.out;
  std::string ids = "ids:";
  for (const int32_t t : s.tokens) {
    ids += ' ';
    ids += std::to_string(t);
  }
  EXPECT_NE(r.out.find(ids + "\n"), std::string::npos) << r.out;
  std::string types;
  for (int64_t t = 0; t < real_length(s); ++t) types += std::to_string(s.token_types[t]);
  EXPECT_NE(r.out.find("token types (real tokens): " + types + "\n"), std::string::npos) << r.out;
  // A GPT-only flag is refused for bert and the tokenizer is required.
  EXPECT_EQ(run_tool(dir, "inspect_data",
                     "--data-path '" + dataset()->prefix() +
                         "' --dataset-type bert --sample 0 --seq-length 64")
                .exit_code,
            2);
}

}  // namespace
}  // namespace megatron::data
