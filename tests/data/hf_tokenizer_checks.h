#pragma once
// Checks shared by the Hugging Face tokenizer tests: a fixture's expected.jsonl (ids as
// `tokenizers` gives them, with the post-processor's BOS, and the decoded text) and its
// corpus_digests.jsonl (count and FNV-1a of every corpus document's ids).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/support/test_paths.h"

namespace megatron::data::testing {

using TokenizersByName = std::map<std::string, std::unique_ptr<Tokenizer>>;

inline TokenizersByName load_hf_tokenizers(const std::filesystem::path& dir,
                                           const std::vector<std::string>& names) {
  TokenizersByName toks;
  for (const auto& name : names)
    toks[name] =
        make_tokenizer({config::TokenizerType::HuggingFace, "", "", (dir / name).string()});
  return toks;
}

// Every row of `jsonl` checked; returns the rows, and how many had "released": true.
struct ExpectedCount {
  int rows = 0;
  int released = 0;
};

inline ExpectedCount check_expected_ids(const TokenizersByName& toks,
                                        const std::filesystem::path& jsonl) {
  std::ifstream in(jsonl);
  EXPECT_TRUE(in.good()) << jsonl;
  std::string line;
  ExpectedCount count;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const Tokenizer& tok = *toks.at(e["tokenizer"].get<std::string>());
    const std::string text = e["text"].get<std::string>();
    const auto ids = e["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids) << e["tokenizer"] << ": " << text.substr(0, 80);
    // The post-processor's special tokens: a BOS in front, or nothing.
    std::vector<int32_t> with_special = ids;
    if (tok.prompt_bos() >= 0) with_special.insert(with_special.begin(), tok.prompt_bos());
    EXPECT_EQ(with_special, e["ids_with_special"].get<std::vector<int32_t>>())
        << e["tokenizer"] << ": " << text.substr(0, 80);
    EXPECT_EQ(tok.decode(e["ids_with_special"].get<std::vector<int32_t>>()),
              e["decoded"].get<std::string>())
        << e["tokenizer"] << ": " << text.substr(0, 80);
    ++count.rows;
    count.released += e.value("released", false) ? 1 : 0;
  }
  return count;
}

inline std::string fnv1a64_hex(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k)
      h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xffu)) * 0x100000001b3ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

// Every document of data/corpus: the count and digest of `tokenizers`' ids. Returns the number
// of (tokenizer, document) rows checked and adds the ids to *tokens.
inline int64_t check_corpus_digests(const TokenizersByName& toks,
                                    const std::filesystem::path& jsonl, int64_t* tokens) {
  std::map<std::string, std::vector<std::string>> docs;
  for (const char* file : {"austen.jsonl", "kjv.jsonl"}) {
    std::ifstream in(std::filesystem::path(MEGATRON_SOURCE_DIR) / "data" / "corpus" / file);
    std::string line;
    while (std::getline(in, line))
      docs[file].push_back(nlohmann::json::parse(line)["text"].get<std::string>());
  }
  std::ifstream in(jsonl);
  EXPECT_TRUE(in.good()) << jsonl;
  std::string line;
  int64_t checked = 0;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const auto& doc = docs.at(e["file"].get<std::string>()).at(e["doc"].get<size_t>());
    const auto ids = toks.at(e["tokenizer"].get<std::string>())->encode(doc);
    EXPECT_EQ(static_cast<int64_t>(ids.size()), e["count"].get<int64_t>()) << line;
    EXPECT_EQ(fnv1a64_hex(ids), e["fnv1a64"].get<std::string>()) << line;
    if (::testing::Test::HasFailure()) return checked;
    ++checked;
    *tokens += static_cast<int64_t>(ids.size());
  }
  return checked;
}

}  // namespace megatron::data::testing
