// HuggingFaceTokenizer on released vocabularies: Phi-3's (LLaMA-2's SentencePiece layout),
// Qwen2/Qwen3's and Qwen3.5's byte-level BPE, Gemma 4's SentencePiece BPE (262144 tokens), as
// tokenizer.json files that transformers' GGUF converter rebuilt from llama.cpp's vocabulary
// files (tests/fixtures/hf_tokenizers_real, made by tools/gen_real_tokenizer_fixtures.py, which
// first checks them against the ids the released tokenizers gave for llama.cpp's test texts).
// The ids, BOS and decoded text of those texts, the corpus's first documents and the edge cases
// equal `tokenizers`' (and so the released tokenizers' where "released"); so do the ids of every
// corpus document.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "data/tokenizer.h"
#include "tests/data/hf_tokenizer_checks.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::vector<std::string> kReleased = {"phi3", "qwen2", "qwen35", "gemma4"};

// tokenizer.json files are unpacked into the build tree (tests/CMakeLists.txt); the expected ids
// stay in the source tree.
fs::path unpacked() { return fs::path(MEGATRON_BINARY_DIR) / "fixtures" / "hf_tokenizers_real"; }
fs::path expected() {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf_tokenizers_real";
}

TEST(ReleasedHuggingFaceTokenizers, IdsMatchTheReleasedTokenizersAndTokenizers) {
  auto toks = testing::load_hf_tokenizers(unpacked(), kReleased);
  const auto count = testing::check_expected_ids(toks, expected() / "expected.jsonl");
  // llama.cpp's texts: 46 for Phi-3, Qwen2 and Gemma 4, 50 for Qwen3.5; then 49 others each.
  EXPECT_EQ(count.released, 46 + 46 + 50 + 46);
  EXPECT_EQ(count.rows, count.released + 4 * 49);

  EXPECT_EQ(toks["phi3"]->vocab_size(), 32064);
  EXPECT_EQ(toks["phi3"]->eod(), 32000);     // <|endoftext|>
  EXPECT_EQ(toks["phi3"]->prompt_bos(), 1);  // <s>
  EXPECT_EQ(toks["qwen2"]->vocab_size(), 151936);
  EXPECT_EQ(toks["qwen2"]->eod(), 151643);     // <|endoftext|>
  EXPECT_EQ(toks["qwen2"]->prompt_bos(), -1);  // Qwen adds no BOS
  EXPECT_EQ(toks["gemma4"]->vocab_size(), 262144);
  EXPECT_EQ(toks["gemma4"]->eod(), 1);          // <eos>
  EXPECT_EQ(toks["gemma4"]->bos(), 2);          // <bos>, for chat templates
  EXPECT_EQ(toks["gemma4"]->prompt_bos(), -1);  // add_bos_token: false
  EXPECT_THAT(toks["phi3"]->describe(), HasSubstr("SentencePiece-style BPE"));
  EXPECT_THAT(toks["gemma4"]->describe(), HasSubstr("SentencePiece-style BPE"));
}

TEST(ReleasedHuggingFaceTokenizers, WholeCorpusMatchesTokenizers) {
  const auto toks = testing::load_hf_tokenizers(unpacked(), kReleased);
  int64_t tokens = 0;
  const int64_t checked =
      testing::check_corpus_digests(toks, expected() / "corpus_digests.jsonl", &tokens);
  EXPECT_EQ(checked, 4 * 1460);
  EXPECT_GT(tokens, 4 * 400000);
}

}  // namespace
}  // namespace megatron::data
