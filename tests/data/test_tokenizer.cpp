// Tokenizers: the shipped SentencePiece model, the byte tokenizer, the factory's errors, and
// the shipped corpus (document split, full round trip through the model).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data_test_util.h"
#include "megatron/config/recipe.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

using testing::expect_input_error;
using testing::ScratchDir;

const std::string kModel = std::string(MEGATRON_SOURCE_DIR) + "/tokenizers/corpus_spm_8k.model";

std::unique_ptr<Tokenizer> spm() {
  return make_tokenizer({config::TokenizerType::SentencePiece, "", "", kModel});
}

TEST(SentencePieceTokenizer, ShippedModelBasics) {
  const auto tok = spm();
  EXPECT_EQ(tok->vocab_size(), 8192);
  EXPECT_EQ(tok->eod(), 4);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_EQ(tok->pad(), 3);
  EXPECT_EQ(tok->encode("<|endoftext|>"), std::vector<int32_t>{tok->eod()});
  EXPECT_EQ(tok->decode({tok->eod()}), "<|endoftext|>");
  // Common words are single pieces (the model learned the corpus).
  EXPECT_EQ(tok->encode(" the").size(), 1u);
  EXPECT_EQ(tok->encode(" LORD").size(), 1u);
  EXPECT_LT(tok->encode("It is a truth universally acknowledged").size(), 10u);
}

TEST(SentencePieceTokenizer, RoundTripsTextAndUnicodeExactly) {
  const auto tok = spm();
  const std::vector<std::string> samples = {
      "Emma Woodhouse, handsome, clever, and rich, with a comfortable home",
      "  3 And God said, Let there be light: and there was light.\n  4 And God saw the light",
      "CHAPTER I\n\n\nTwo  spaces,\ttab, trailing space \nand\r\nCRLF",
      " leading space and trailing newline\n",
      "naïve café — Übermaß, 日本語のテキスト, emoji 🙂👍🏽, Ελληνικά, "
      "عربى",
      "\x01\x7f control bytes",
      "",
      "<|endoftext|>between<|endoftext|>",
  };
  for (const auto& s : samples) {
    const auto ids = tok->encode(s);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok->vocab_size());
    }
    EXPECT_EQ(tok->decode(ids), s) << "sample: " << s;
  }
  // Unknown characters go through byte fallback, never <unk> (id 0).
  for (int32_t id : tok->encode("日本語 🙂")) EXPECT_NE(id, 0);
}

TEST(SentencePieceTokenizer, DecodeRejectsOutOfRangeIds) {
  const auto tok = spm();
  expect_input_error([&] { tok->decode({5, 8192}); }, {"8192", kModel});
  expect_input_error([&] { tok->decode({-1}); }, {"-1"});
}

TEST(SentencePieceTokenizer, BadModelFilesNameTheFile) {
  ScratchDir dir;
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::SentencePiece, "", "", dir.file("nope.model")});
      },
      {dir.file("nope.model")});
  testing::write_text(dir.file("garbage.model"), "this is not a protobuf \xff\xfe");
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::SentencePiece, "", "", dir.file("garbage.model")});
      },
      {dir.file("garbage.model")});
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::SentencePiece, "", "", ""});
      },
      {"model"});
}

TEST(ByteTokenizer, EncodeDecode) {
  const auto tok = make_tokenizer({config::TokenizerType::Byte, "", "", ""});
  EXPECT_EQ(tok->vocab_size(), 257);
  EXPECT_EQ(tok->eod(), 256);
  EXPECT_EQ(tok->pad(), -1);
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_EQ(tok->eos(), -1);
  EXPECT_EQ(tok->encode("Hi\n"), (std::vector<int32_t>{72, 105, 10}));
  const std::string s = "caf\xc3\xa9 \xf0\x9f\x99\x82";
  const auto ids = tok->encode(s);
  EXPECT_EQ(ids.size(), s.size());
  EXPECT_EQ(ids[3], 0xc3);
  EXPECT_EQ(tok->decode(ids), s);
  EXPECT_EQ(tok->decode({104, 105, 256}), "hi<|endoftext|>");
  expect_input_error([&] { tok->decode({257}); }, {"257"});
}

TEST(MakeTokenizer, UnknownTypesAndMissingFiles) {
  // GPT-2 BPE and BERT WordPiece are tested in test_tokenizer_gpt2.cpp / test_tokenizer_bert.cpp.
  expect_input_error(
      [] {
        make_tokenizer({config::TokenizerType::GPT2BPE, "vocab.json", "merges.txt", ""});
      },
      {"vocab.json", "does not exist"});
  expect_input_error(
      [] {
        make_tokenizer({config::TokenizerType::BertWordPieceLowerCase, "vocab.txt", "", ""});
      },
      {"vocab.txt", "does not exist"});
  // Names are checked where they are read (the tools' --tokenizer-type, the recipe's parser).
  expect_input_error([] { parse_tokenizer_type("BertWordPiece"); }, {"BertWordPiece", "unknown"});
  expect_input_error([] { parse_tokenizer_type("Tiktoken"); },
                     {"Tiktoken", "unknown", "GPT2BPETokenizer", "NullTokenizer"});
  EXPECT_EQ(parse_tokenizer_type("BertWordPieceCase"), config::TokenizerType::BertWordPieceCase);
  expect_input_error(
      [] {
        make_tokenizer({config::TokenizerType::Null, "", "", ""});
      },
      {"NullTokenizer", "pre-tokenized"});
}

TEST(MakeTokenizer, SpecFromARecipe) {
  config::Recipe r;
  r.source_path = "recipes/built_in_code.yaml";
  // A recipe built in code that skipped validate(): the error names the recipe and the key.
  expect_input_error([&] { tokenizer_spec(r); },
                     {"recipes/built_in_code.yaml", "data.tokenizer.type", "missing"});
  r.root_dir = "/repo";
  r.data.tokenizer.type = config::TokenizerType::GPT2BPE;
  r.data.tokenizer.vocab_file = "gpt2/vocab.json";
  r.data.tokenizer.merge_file = "/abs/merges.txt";
  const TokenizerSpec s = tokenizer_spec(r);
  EXPECT_EQ(s.type, config::TokenizerType::GPT2BPE);
  EXPECT_EQ(s.vocab_file, "/repo/gpt2/vocab.json");  // relative: against the repository root
  EXPECT_EQ(s.merge_file, "/abs/merges.txt");
  EXPECT_EQ(s.model, "");
}

std::vector<std::string> load_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> docs;
  std::string line;
  while (std::getline(in, line)) docs.push_back(nlohmann::json::parse(line).at("text"));
  return docs;
}

TEST(Corpus, ShippedJsonlIsSplitIntoChapters) {
  const std::string dir = std::string(MEGATRON_SOURCE_DIR) + "/data/corpus/";
  const auto austen = load_jsonl(dir + "austen.jsonl");
  const auto kjv = load_jsonl(dir + "kjv.jsonl");
  // 269 chapters (Emma 55, Mansfield Park 48, Northanger Abbey 31, Persuasion 24, Pride and
  // Prejudice 61, Sense and Sensibility 50) + 2 notes; 1189 Bible chapters.
  EXPECT_EQ(austen.size(), 271u);
  EXPECT_EQ(kjv.size(), 1189u);
  EXPECT_EQ(austen.front().rfind("EMMA\n\nBy Jane Austen\n\nVOLUME I\n\nCHAPTER I\n", 0), 0u);
  EXPECT_EQ(kjv.front().rfind("Genesis 1\n\n  1 In the beginning God created", 0), 0u);
  EXPECT_EQ(kjv.back().rfind("Revelation 22\n", 0), 0u);
  EXPECT_NE(austen.back().find("THE END"), std::string::npos);
  // The model round-trips whole chapters exactly.
  const auto tok = spm();
  for (const auto* doc : {&austen[1], &austen[200], &kjv[0], &kjv[1188]}) {
    const auto ids = tok->encode(*doc);
    EXPECT_EQ(tok->decode(ids), *doc);
    EXPECT_LT(ids.size(), doc->size() / 2) << "the tokenizer should compress its own corpus";
  }
}

}  // namespace
}  // namespace megatron::data
