// The sentence splitter and preprocess_data --split-sentences, and BERTDataset on small
// synthetic sentence datasets: no sample without two-sentence documents, and Megatron parity
// (samples and a checksum of all of them against a transcription of Megatron's code).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "data/bert_dataset.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/support/bert_dataset_test_util.h"

namespace megatron::data {
namespace {

using testing::bert_info;
using testing::bert_tokenizer;
using testing::expect_input_error;
using testing::kVocab;
using testing::quiet;
using testing::run_tool;
using testing::ScratchDir;
using testing::write_text;

// ---- the sentence splitter ----------------------------------------------------------------

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (const auto s : split_sentences(text)) out.emplace_back(s);
  return out;
}

TEST(SentenceSplitter, Rules) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("It rained. We stayed in! Did you? Yes."),
            (V{"It rained.", "We stayed in!", "Did you?", "Yes."}));
  // Abbreviations and initials do not end sentences; "I." does.
  EXPECT_EQ(
      split("Mr. Darcy and Mrs. Bennet met Dr. J. Smith at St. Paul's. So did I. Then home."),
      (V{"Mr. Darcy and Mrs. Bennet met Dr. J. Smith at St. Paul's.", "So did I.", "Then home."}));
  // Closing quotes stay with their sentence; a lower-case word after "!" continues it.
  EXPECT_EQ(split("\"Oh!\" said she. \"Is it so?\" He nodded."),
            (V{"\"Oh!\" said she.", "\"Is it so?\"", "He nodded."}));
  // No whitespace, or a lower-case continuation: no break. Digits (verse numbers) do break.
  EXPECT_EQ(split("Version 3.5 is out. e.g. not here... and more. 2 And the earth."),
            (V{"Version 3.5 is out. e.g. not here... and more.", "2 And the earth."}));
  // A blank line always ends a sentence; single newlines are kept inside one.
  EXPECT_EQ(split("CHAPTER I\n\n\nEmma Woodhouse, handsome,\nclever, and rich\n \t\nThe end"),
            (V{"CHAPTER I", "Emma Woodhouse, handsome,\nclever, and rich", "The end"}));
  EXPECT_EQ(split("  \n\n  "), V{});
  EXPECT_EQ(split("no terminator at all"), V{"no terminator at all"});
}

// ---- preprocess_data --split-sentences ------------------------------------------------------

TEST(PreprocessSplitSentences, OneSequencePerSentenceEodOnTheLast) {
  ScratchDir dir;
  const std::vector<std::string> texts = {"Emma was rich. She was clever!\n\nChapter two", "",
                                          "One sentence only", "?? !!"};
  std::string jsonl;
  for (const auto& t : texts) jsonl += nlohmann::json({{"text", t}}).dump() + "\n";
  write_text(dir.file("in.jsonl"), jsonl);
  const auto r = run_tool(dir, "preprocess_data",
                          "--input '" + dir.file("in.jsonl") + "' --output-prefix '" +
                              dir.file("out") + "' --tokenizer-type BertWordPieceLowerCase " +
                              "--vocab-file '" + kVocab + "' --split-sentences --append-eod");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("sentences"), std::string::npos) << r.err;
  IndexedDataset ds(dir.file("out_text_sentence"));
  const Tokenizer& tok = bert_tokenizer();
  // Document 0: three sentences, EOD ([SEP]) at the end of the last; document 1 empty;
  // document 2: one sentence; document 3: "?? !!" is one sentence ("!" opens none).
  ASSERT_EQ(ds.num_documents(), 4);
  const auto di = ds.document_indices();
  EXPECT_EQ(std::vector<int64_t>(di.begin(), di.end()), (std::vector<int64_t>{0, 3, 3, 4, 5}));
  EXPECT_EQ(ds.read(0), tok.encode("Emma was rich."));
  EXPECT_EQ(ds.read(1), tok.encode("She was clever!"));
  auto last = tok.encode("Chapter two");
  last.push_back(tok.eod());
  EXPECT_EQ(ds.read(2), last);
  auto only = tok.encode("One sentence only");
  only.push_back(tok.eod());
  EXPECT_EQ(ds.read(3), only);
  // Without the flag: the usual document-level output.
  const auto r2 =
      run_tool(dir, "preprocess_data",
               "--input '" + dir.file("in.jsonl") + "' --output-prefix '" + dir.file("doc") +
                   "' --tokenizer-type BertWordPieceLowerCase " + "--vocab-file '" + kVocab + "'");
  ASSERT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(IndexedDataset(dir.file("doc_text_document")).num_sequences(), 3);
}

TEST(BertDataset, NoSampleWithoutTwoSentenceDocuments) {
  ScratchDir dir;
  {
    IndexedDatasetWriter w(dir.file("one"), DType::U16);
    for (int d = 0; d < 5; ++d) w.add_document(std::vector<int32_t>{2000, 2001, 2002});
    w.finalize();
  }
  auto ds = std::make_shared<const IndexedDataset>(dir.file("one"));
  BERTDatasetConfig cfg;
  cfg.seq_length = 16;
  cfg.log = quiet;
  cfg.num_samples = 10;
  expect_input_error(
      [&] {
        BERTDataset::build(ds, 0, {0, 5}, bert_info(), cfg);
      },
      {dir.file("one"), "no BERT sample", "2 sentence"});
  cfg.binary_head = false;  // one sentence is enough then
  EXPECT_EQ(BERTDataset::build(ds, 0, {0, 5}, bert_info(), cfg)->num_samples(), 10);
}

// ---- Megatron parity --------------------------------------------------------------------------

// 40 documents of 1..6 sentences of 2..31 pseudo-random vocabulary ids (word pieces and "##"
// pieces alike).
std::shared_ptr<const IndexedDataset> synthetic(const std::string& prefix) {
  IndexedDatasetWriter w(prefix, DType::U16);
  uint32_t x = 12345;
  const auto next = [&] {
    x = x * 1103515245u + 12345u;
    return x >> 8;
  };
  for (int d = 0; d < 40; ++d) {
    for (int s = 0; s < 1 + d % 6; ++s) {
      std::vector<int32_t> ids(2 + next() % 30);
      for (auto& t : ids) t = static_cast<int32_t>(1000 + next() % 29522);
      w.add_sequence(ids);
    }
    w.end_document();
  }
  w.finalize();
  return std::make_shared<const IndexedDataset>(prefix);
}

// FNV-1a over every sample's tokens, labels, token types, is_random and truncated.
uint64_t checksum(const BERTDataset& bert) {
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&](int64_t v) { h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull; };
  for (int64_t i = 0; i < bert.num_samples(); ++i) {
    const BertSample s = bert.get(i);
    for (const int32_t v : s.tokens) mix(v);
    for (const int32_t v : s.labels) mix(v);
    for (const int32_t v : s.token_types) mix(v);
    mix(s.is_random);
    mix(s.truncated);
  }
  return h;
}

// Expected values from an independent transcription of Megatron's build_mapping (helpers.cpp)
// and BERTMaskedWordPieceDataset.__getitem__ / _create_masked_lm_predictions, run with numpy
// 1.24's RandomState on this synthetic dataset (seed 4321, S 32, short_seq_prob 0.2, max n-gram
// 3, all 40 documents, num_samples 100).
TEST(BertDataset, MatchesMegatronTranscription) {
  ScratchDir dir;
  const auto ds = synthetic(dir.file("syn"));
  BERTDatasetConfig cfg;
  cfg.seq_length = 32;
  cfg.seed = 4321;
  cfg.short_seq_probability = 0.2;
  cfg.num_samples = 100;
  cfg.log = quiet;
  const auto bert = BERTDataset::build(ds, 0, {0, 40}, bert_info(), cfg);
  EXPECT_EQ(bert->num_samples(), 104);
  EXPECT_EQ(bert->num_epochs(), 2);
  const std::vector<std::array<int64_t, 3>> mapping = {
      {38, 40, 29}, {36, 38, 29}, {82, 84, 7},  {52, 54, 29},
      {90, 94, 29}, {57, 60, 16}, {12, 15, 29}, {73, 75, 4},
  };
  for (size_t k = 0; k < mapping.size(); ++k) {
    const auto& r = bert->sample_range(static_cast<int64_t>(k));
    EXPECT_EQ((std::array<int64_t, 3>{r.begin, r.end, r.target_length}), mapping[k]) << k;
  }
  {
    const BertSample s = bert->get(0);
    EXPECT_EQ(s.tokens,
              (std::vector<int32_t>{101,   7756,  1649,  19735, 25830, 10459, 5967,  103,
                                    13828, 103,   24880, 13353, 7103,  16530, 3558,  29041,
                                    102,   28903, 25437, 20315, 4694,  20775, 7559,  1905,
                                    7912,  7881,  16236, 3682,  103,   6598,  13358, 102}));
    EXPECT_EQ(s.labels, (std::vector<int32_t>{-100,  -100,  -100, -100, -100, -100, -100, 11737,
                                              13828, 16917, -100, -100, -100, -100, -100, -100,
                                              -100,  -100,  -100, -100, -100, -100, -100, -100,
                                              -100,  -100,  -100, -100, 9330, -100, -100, -100}));
    EXPECT_EQ(s.token_types,
              (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                    0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(s.is_random, 1);
    EXPECT_EQ(s.truncated, 1);
  }
  {
    const BertSample s = bert->get(1);
    EXPECT_EQ(s.tokens,
              (std::vector<int32_t>{101,   23666, 19001, 26657, 6494,  26933, 23215, 21710,
                                    103,   7273,  21886, 17893, 6992,  7134,  16277, 6221,
                                    15549, 20652, 25520, 102,   4530,  18836, 29571, 103,
                                    19692, 12876, 14138, 4803,  10035, 23266, 10953, 102}));
    EXPECT_EQ(s.labels, (std::vector<int32_t>{-100,  -100, -100, -100,  -100, -100, -100, -100,
                                              1300,  -100, -100, 17893, -100, -100, -100, -100,
                                              -100,  -100, -100, -100,  -100, -100, -100, 12520,
                                              19692, -100, -100, -100,  -100, -100, -100, -100}));
    EXPECT_EQ(s.token_types,
              (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                    0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(s.is_random, 0);
    EXPECT_EQ(s.truncated, 1);
  }
  EXPECT_EQ(checksum(*bert), 6925677265678493487ull);
}

}  // namespace
}  // namespace megatron::data
