// HuggingFaceTokenizer (data/tokenizer_hf.h) against Hugging Face `tokenizers` itself: the ids
// of the shipped corpus's first documents and of edge cases (contractions in any case, digit
// runs, whitespace and line-break runs, non-ASCII, special tokens written in the text) for
// GPT-2's tokenizer.json, a LLaMA-3-style and a Qwen2-style one (NFC normalizer;
// tests/fixtures/hf_tokenizers, made by
// tools/gen_hf_tokenizer_fixtures.py); the BOS of the post-processor; decoding; tokenizer.model
// directories; and errors naming the file and setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "megatron/core/error.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path fixtures() {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf_tokenizers";
}

TEST(HuggingFaceTokenizer, IdsMatchTokenizersOnCorpusAndEdgeCases) {
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  for (const char* name : {"gpt2", "llama3_style", "qwen2_style"})
    toks[name] = make_tokenizer({"HuggingFaceTokenizer", "", "", (fixtures() / name).string()});
  std::ifstream in(fixtures() / "expected.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const Tokenizer& tok = *toks.at(e["tokenizer"].get<std::string>());
    const std::string text = e["text"].get<std::string>();
    const auto ids = e["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids) << e["tokenizer"] << ": " << text.substr(0, 80);
    // The post-processor's special tokens: LLaMA-3's BOS in front, nothing for GPT-2.
    std::vector<int32_t> with_special = ids;
    if (tok.bos() >= 0) with_special.insert(with_special.begin(), tok.bos());
    EXPECT_EQ(with_special, e["ids_with_special"].get<std::vector<int32_t>>())
        << text.substr(0, 80);
    EXPECT_EQ(tok.decode(e["ids_with_special"].get<std::vector<int32_t>>()),
              e["decoded"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 40);
  EXPECT_EQ(toks["gpt2"]->vocab_size(), 50257);
  EXPECT_EQ(toks["gpt2"]->eod(), 50256);
  EXPECT_EQ(toks["llama3_style"]->eod(), 1);  // <|end_of_text|>
  EXPECT_EQ(toks["llama3_style"]->bos(), 0);
  EXPECT_EQ(toks["qwen2_style"]->bos(), -1);  // Qwen2 has no BOS
  EXPECT_EQ(toks["qwen2_style"]->eod(), 0);   // <|endoftext|>
  // The same ids as the GPT-2 tokenizer from vocab.json + merges.txt.
  const auto bpe = make_tokenizer(
      {"GPT2BPETokenizer", (fs::path(MEGATRON_SOURCE_DIR) / "tokenizers/gpt2/vocab.json").string(),
       (fs::path(MEGATRON_SOURCE_DIR) / "tokenizers/gpt2/merges.txt").string(), ""});
  const std::string text = "It is a truth universally acknowledged, 1234 times\n\n  over.";
  EXPECT_EQ(toks["gpt2"]->encode(text), bpe->encode(text));
}

// Every document of the shipped corpus: the same number of ids and the same FNV-1a digest of them
// as `tokenizers` gives (tests/fixtures/hf_tokenizers/corpus_digests.jsonl).
TEST(HuggingFaceTokenizer, WholeCorpusMatchesTokenizers) {
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  for (const char* name : {"gpt2", "llama3_style", "qwen2_style"})
    toks[name] = make_tokenizer({"HuggingFaceTokenizer", "", "", (fixtures() / name).string()});
  std::map<std::string, std::vector<std::string>> docs;
  for (const char* file : {"austen.jsonl", "kjv.jsonl"}) {
    std::ifstream in(fs::path(MEGATRON_SOURCE_DIR) / "data" / "corpus" / file);
    std::string line;
    while (std::getline(in, line))
      docs[file].push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  }
  std::ifstream in(fixtures() / "corpus_digests.jsonl");
  std::string line;
  int64_t checked = 0, tokens = 0;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const auto& doc = docs.at(e["file"].get<std::string>()).at(e["doc"].get<size_t>());
    const auto ids = toks.at(e["tokenizer"].get<std::string>())->encode(doc);
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t id : ids)
      for (int k = 0; k < 4; ++k)
        h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    ASSERT_EQ(static_cast<int64_t>(ids.size()), e["count"].get<int64_t>()) << line;
    ASSERT_EQ(std::string(hex), e["fnv1a64"].get<std::string>()) << line;
    ++checked;
    tokens += static_cast<int64_t>(ids.size());
  }
  EXPECT_EQ(checked, 3 * 1460);
  EXPECT_GT(tokens, 1000000);
}

class HuggingFaceTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("megatron_hf_tok_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string error_of(const std::string& path) {
    try {
      make_huggingface_tokenizer(path);
    } catch (const InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "loaded " << path;
    return "";
  }
  // The LLaMA-3-style tokenizer.json with `edit` applied.
  std::string edited(const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j =
        nlohmann::json::parse(std::ifstream(fixtures() / "llama3_style/tokenizer.json"));
    edit(j);
    const fs::path p = dir_ / concat("t", ++n_, ".json");
    std::ofstream(p) << j.dump();
    return p.string();
  }
  fs::path dir_;
  int n_ = 0;
};

TEST_F(HuggingFaceTokenizerFiles, TokenizerModelDirectoriesUseSentencePiece) {
  const fs::path spm = fs::path(MEGATRON_SOURCE_DIR) / "tokenizers" / "corpus_spm_8k.model";
  fs::copy_file(spm, dir_ / "tokenizer.model");
  const auto hf = make_huggingface_tokenizer(dir_.string());
  const auto sp = make_tokenizer({"SentencePieceTokenizer", "", "", spm.string()});
  const std::string text = "Emma Woodhouse, handsome, clever, and rich.";
  EXPECT_EQ(hf->encode(text), sp->encode(text));
  EXPECT_EQ(hf->vocab_size(), sp->vocab_size());
}

TEST_F(HuggingFaceTokenizerFiles, UnsupportedSettingsAreNamed) {
  EXPECT_THAT(error_of((dir_ / "none").string()), HasSubstr("does not exist"));
  EXPECT_THAT(error_of(dir_.string()), HasSubstr("has neither tokenizer.json nor tokenizer.model"));
  std::ofstream(dir_ / "bad.json") << "{\"model\": ";
  EXPECT_THAT(error_of((dir_ / "bad.json").string()), HasSubstr("is not valid JSON"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; })),
              HasSubstr("model.type 'WordPiece' is not supported"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) {
                j["normalizer"] = {{"type", "NFKC"}};
              })),
              HasSubstr("normalizer NFKC is not supported"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) {
                j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
              })),
              HasSubstr("pre-tokenizer regex \"\\\\w+\" is not one this build implements"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["model"]["merges"][3] = "x y z"; })),
              HasSubstr("model.merges[3]: expected \"a b\""));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) {
                j["model"]["merges"][2] = {"qq", "zz"};
              })),
              HasSubstr("model.merges[2]: token 'qq' is not in model.vocab"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["added_tokens"][0]["lstrip"] = true; })),
              HasSubstr("lstrip is not supported"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["model"]["vocab"].erase("a"); })),
              HasSubstr("model.vocab"));
}

}  // namespace
}  // namespace megatron::data
