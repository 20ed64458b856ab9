// HuggingFaceTokenizer (data/tokenizer_hf.h) against Hugging Face `tokenizers` itself: the ids
// of the shipped corpus's first documents and of edge cases (contractions in any case, digit
// runs, whitespace and line-break runs, non-ASCII, special tokens written in the text; letter
// case classes, marks, '/', compatibility characters and accents for the later ones) for
// GPT-2's tokenizer.json, a LLaMA-3-style and a Qwen2-style one (NFC normalizer), a
// Mistral-NeMo-style one (tekken regex) and two with normalizer Sequences (NFKC, Lowercase,
// Replace, Strip, Prepend; NFD, StripAccents, NFKD) and added tokens matched before and after
// normalization (tests/fixtures/hf_tokenizers, made by tools/gen_hf_tokenizer_fixtures.py); the
// whole corpus's digests; the BOS of the post-processor; decoding; tokenizer.model directories;
// and errors naming the file and setting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_hf.h"
#include "data/tokenizer_hf_sp.h"
#include "data/tokenizer_unicode.h"
#include "megatron/core/error.h"
#include "tests/data/hf_tokenizer_checks.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Every tokenizer of tests/fixtures/hf_tokenizers, in the order of expected.jsonl.
// (metaspace_style, llama2_style, metaspace_unk_style: SentencePiece-style BPE over characters,
// byte fallback or a fused <unk>, Metaspace or LLaMA-2's Prepend/Replace normalizer.)
constexpr const char* kFixtureTokenizers[] = {
    "gpt2",          "llama3_style",    "qwen2_style",  "tekken_style",       "normalizers_style",
    "accents_style", "metaspace_style", "llama2_style", "metaspace_unk_style"};

fs::path fixtures() {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "hf_tokenizers";
}

TEST(HuggingFaceTokenizer, IdsMatchTokenizersOnCorpusAndEdgeCases) {
  auto toks = testing::load_hf_tokenizers(
      fixtures(), {std::begin(kFixtureTokenizers), std::end(kFixtureTokenizers)});
  const int checked = testing::check_expected_ids(toks, fixtures() / "expected.jsonl").rows;
  EXPECT_GE(checked, 40);
  EXPECT_EQ(toks["gpt2"]->vocab_size(), 50257);
  EXPECT_EQ(toks["gpt2"]->eod(), 50256);
  EXPECT_EQ(toks["llama3_style"]->eod(), 1);  // <|end_of_text|>
  EXPECT_EQ(toks["llama3_style"]->bos(), 0);
  EXPECT_EQ(toks["qwen2_style"]->bos(), -1);  // Qwen2 has no BOS
  EXPECT_EQ(toks["qwen2_style"]->eod(), 0);   // <|endoftext|>
  EXPECT_EQ(toks["tekken_style"]->bos(), 1);  // <s>, from the template
  EXPECT_EQ(toks["tekken_style"]->eod(), 2);  // </s>
  EXPECT_EQ(toks["normalizers_style"]->eod(), 0);
  EXPECT_EQ(toks["normalizers_style"]->vocab_size(), 1002);  // with [MASK] and @@Raw@@
  EXPECT_THAT(toks["tekken_style"]->describe(), HasSubstr("Mistral-NeMo (tekken) pre-tokenizer"));
  EXPECT_THAT(toks["normalizers_style"]->describe(), HasSubstr("Sequence normalizer"));
  EXPECT_THAT(toks["metaspace_style"]->describe(),
              HasSubstr("SentencePiece-style BPE, Metaspace pre-tokenizer"));
  EXPECT_EQ(toks["metaspace_style"]->bos(), 1);         // <s>, from the template
  EXPECT_EQ(toks["metaspace_style"]->eod(), 2);         // </s>
  EXPECT_EQ(toks["llama2_style"]->vocab_size(), 1458);  // 1200 + 256 byte tokens + 2 added
  // The same ids as the GPT-2 tokenizer from vocab.json + merges.txt.
  const auto bpe =
      make_tokenizer({config::TokenizerType::GPT2BPE,
                      (fs::path(MEGATRON_SOURCE_DIR) / "tokenizers/gpt2/vocab.json").string(),
                      (fs::path(MEGATRON_SOURCE_DIR) / "tokenizers/gpt2/merges.txt").string(), ""});
  const std::string text = "It is a truth universally acknowledged, 1234 times\n\n  over.";
  EXPECT_EQ(toks["gpt2"]->encode(text), bpe->encode(text));
}

// Added tokens that match whole words only (single_word): no word character (Rust regex's \w:
// letters, letter numbers, enclosed letters, marks, decimal digits, connector punctuation,
// joiners) right before or after; a match inside a word stays text. tokenizers' ids
// (expected_single_word.jsonl; tools/gen_hf_tokenizer_fixtures.py --single-word).
TEST(HuggingFaceTokenizer, SingleWordAddedTokensMatchWholeWordsOnly) {
  const auto tok = make_tokenizer(
      {config::TokenizerType::HuggingFace, "", "", (fixtures() / "single_word_style").string()});
  std::ifstream in(fixtures() / "expected_single_word.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const std::string text = e["text"].get<std::string>();
    EXPECT_EQ(tok->encode(text), e["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ(tok->decode(e["ids"].get<std::vector<int32_t>>()), e["decoded"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 19);
}

// Every document of the shipped corpus: the same number of ids and the same FNV-1a digest of them
// as `tokenizers` gives (tests/fixtures/hf_tokenizers/corpus_digests.jsonl).
TEST(HuggingFaceTokenizer, WholeCorpusMatchesTokenizers) {
  const auto toks = testing::load_hf_tokenizers(
      fixtures(), {std::begin(kFixtureTokenizers), std::end(kFixtureTokenizers)});
  int64_t tokens = 0;
  const int64_t checked =
      testing::check_corpus_digests(toks, fixtures() / "corpus_digests.jsonl", &tokens);
  EXPECT_EQ(checked, 9 * 1460);
  EXPECT_GT(tokens, 1000000);
}

// Mistral-NeMo's (tekken) pre-tokenizer by itself: the pieces `tokenizers`' Split with that
// regex gives (pre_tokenize_str, tokenizers 0.23.3).
TEST(HuggingFaceTokenizer, TekkenPreTokenizerSplitsLikeTokenizers) {
  auto pieces = [](std::string_view text) {
    std::vector<std::string> out;
    tekken_pretokenize(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
    return out;
  };
  // A word is upper-case letters then lower-case ones: a split where upper follows lower.
  EXPECT_THAT(
      pieces("HELLO World camelCaseWord XMLHttpRequest ABCdef"),
      ElementsAre("HELLO", " World", " camel", "Case", "Word", " XMLHttp", "Request", " ABCdef"));
  // Title case (U+01C5) starts a word like upper case.
  EXPECT_THAT(pieces("\u01c5ungla a\u01c5b"), ElementsAre("\u01c5ungla", " a", "\u01c5b"));
  // Marks are in both letter classes but not \p{L}: one may be the optional leading character.
  EXPECT_THAT(pieces("e\u0301 \u0301A \u0301\u0302start x\u20dd"),
              ElementsAre("e\u0301", " \u0301", "A", " \u0301\u0302start", " x\u20dd"));
  EXPECT_THAT(pieces("\u0301AB"), ElementsAre("\u0301", "AB"));
  // '/' and line breaks after punctuation; single digits.
  EXPECT_THAT(pieces(" ./\n\n/x a//b 1234"),
              ElementsAre(" ./\n\n/", "x", " a", "//", "b", " ", "1", "2", "3", "4"));
  EXPECT_THAT(pieces("  \n\t x  "), ElementsAre("  \n", "\t", " x", "  "));
  EXPECT_THAT(pieces(""), ElementsAre());
}

// Gemma's pre-tokenizer, Split on a literal string with MergedWithPrevious: the pieces
// `tokenizers`' pre_tokenize_str gives (tokenizers 0.23.3): a delimiter joins the piece before
// it unless that piece is itself a delimiter.
TEST(HuggingFaceTokenizer, LiteralSplitMergesLikeTokenizers) {
  auto pieces = [](const std::string& delimiter, std::string_view text) {
    std::vector<std::string> out;
    LiteralSplit{delimiter}.apply(text, [&](std::string_view w) { out.emplace_back(w); });
    return out;
  };
  EXPECT_THAT(pieces(" ", "a b"), ElementsAre("a ", "b"));
  EXPECT_THAT(pieces(" ", "a  b"), ElementsAre("a ", " ", "b"));
  EXPECT_THAT(pieces(" ", "  lead"), ElementsAre(" ", " ", "lead"));
  EXPECT_THAT(pieces(" ", "trail  "), ElementsAre("trail ", " "));
  EXPECT_THAT(pieces(" ", " "), ElementsAre(" "));
  EXPECT_THAT(pieces(" ", ""), ElementsAre());
  EXPECT_THAT(pieces(" ", "x   y z"), ElementsAre("x ", " ", " ", "y ", "z"));
  EXPECT_THAT(pieces("ab", "xabyab"), ElementsAre("xab", "yab"));
  EXPECT_THAT(pieces("ab", "ababx"), ElementsAre("ab", "ab", "x"));
}

// The Unicode pieces the normalizers add: NFKC / NFKD and the per-character lowercase of
// `tokenizers`' Lowercase (no final-sigma rule, unlike Python's str.lower()).
TEST(HuggingFaceTokenizer, CompatibilityFormsAndPerCharacterLowercase) {
  auto apply = [](void (*f)(std::u32string_view, std::u32string&), std::u32string_view s) {
    std::u32string out;
    f(s, out);
    return out;
  };
  EXPECT_EQ(apply(unicode::append_nfkc, U"\ufb01 \u2460 \u01c4 \uff21e\u0301"),
            U"fi 1 D\u017d A\u00e9");
  EXPECT_EQ(apply(unicode::append_nfkd, U"\u01c4\u00e9"), U"DZ\u030ce\u0301");
  EXPECT_EQ(apply(unicode::append_nfkd, U"\ufdfa").size(), 18u);             // the longest one
  EXPECT_EQ(apply(unicode::append_nfd, U"\ufb01\u00e9"), U"\ufb01e\u0301");  // canonical only
  EXPECT_EQ(apply(unicode::append_lower_chars, U"\u03a3\u039f\u03a3 \u0130"),
            U"\u03c3\u03bf\u03c3 i\u0307");
  EXPECT_EQ(apply(unicode::append_lower, U"\u03a3\u039f\u03a3"), U"\u03c3\u03bf\u03c2");
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
  // The LLaMA-3-style (or another fixture's) tokenizer.json with `edit` applied.
  std::string edited(const std::function<void(nlohmann::json&)>& edit,
                     const std::string& fixture = "llama3_style") {
    nlohmann::json j =
        nlohmann::json::parse(std::ifstream(fixtures() / fixture / "tokenizer.json"));
    edit(j);
    const fs::path p = dir_ / concat("t", ++n_, ".json");
    std::ofstream(p) << j.dump();
    return p.string();
  }
  fs::path dir_;
  int n_ = 0;
};

// tokenizer_config.json's add_bos_token, as transformers honours it (it rebuilds the template):
// false drops the template's BOS from prompt_bos() (bos() stays, for chat templates), true adds
// the config's bos_token to a template without one; absent, the template decides.
TEST_F(HuggingFaceTokenizerFiles, AddBosTokenDecidesWhatEncodingPutsFirst) {
  auto load = [&](const std::string& fixture, const std::string& config) {
    const std::string path = edited([](nlohmann::json&) {}, fixture);
    std::ofstream(dir_ / "tokenizer_config.json") << config;
    return make_huggingface_tokenizer(path);
  };
  auto tok = load("llama3_style", "{}");
  EXPECT_EQ(tok->bos(), 0);  // <|begin_of_text|>, the template's
  EXPECT_EQ(tok->prompt_bos(), 0);
  tok = load("llama3_style", R"({"add_bos_token": false})");
  EXPECT_EQ(tok->bos(), 0);
  EXPECT_EQ(tok->prompt_bos(), -1);
  tok = load("qwen2_style", R"({"bos_token": "<|im_start|>"})");
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->prompt_bos(), -1);  // no template BOS, no add_bos_token
  tok = load("qwen2_style", R"({"bos_token": "<|im_start|>", "add_bos_token": true})");
  EXPECT_EQ(tok->prompt_bos(), 1);
}

TEST_F(HuggingFaceTokenizerFiles, TokenizerModelDirectoriesUseSentencePiece) {
  const fs::path spm = fs::path(MEGATRON_SOURCE_DIR) / "tokenizers" / "corpus_spm_8k.model";
  fs::copy_file(spm, dir_ / "tokenizer.model");
  const auto hf = make_huggingface_tokenizer(dir_.string());
  const auto sp = make_tokenizer({config::TokenizerType::SentencePiece, "", "", spm.string()});
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
                j["normalizer"] = {{"type", "Nmt"}};
              })),
              HasSubstr("normalizer type 'Nmt' (normalizer) is not supported"));
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
  EXPECT_THAT(
      error_of(edited([](nlohmann::json& j) { j["added_tokens"][0]["single_word"] = "no"; })),
      HasSubstr("single_word is not true/false"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["added_tokens"][0]["rstrip"] = 1; })),
              HasSubstr("rstrip is not true/false"));
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["model"]["vocab"].erase("a"); })),
              HasSubstr("model.vocab"));
  // Values of the wrong JSON type anywhere are InputErrors naming the file.
  for (const auto& corrupt : std::vector<std::function<void(nlohmann::json&)>>{
           [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "no"; },
           [](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = 3; },
           [](nlohmann::json& j) { j["post_processor"] = true; },
           [](nlohmann::json& j) { j["model"]["ignore_merges"] = "yes"; }}) {
    const std::string path = edited(corrupt);
    const std::string error = error_of(path);
    EXPECT_THAT(error, HasSubstr(path));
    EXPECT_THAT(error, HasSubstr("wrong JSON type"));
  }
}

// SentencePiece-style files: settings the character BPE cannot honour are named.
TEST_F(HuggingFaceTokenizerFiles, UnsupportedSentencePieceSettingsAreNamed) {
  auto sp = [&](const std::function<void(nlohmann::json&)>& edit) {
    return error_of(edited(edit, "metaspace_style"));
  };
  EXPECT_THAT(sp([](nlohmann::json& j) { j["pre_tokenizer"]["replacement"] = "_"; }),
              HasSubstr("Metaspace replacement \"_\" is not supported"));
  EXPECT_THAT(sp([](nlohmann::json& j) { j["pre_tokenizer"]["prepend_scheme"] = "twice"; }),
              HasSubstr("Metaspace prepend_scheme 'twice'"));
  EXPECT_THAT(sp([](nlohmann::json& j) {
                j["decoder"] = {{"type", "ByteLevel"}};
              }),
              HasSubstr("decoder ByteLevel is not supported with SentencePiece-style BPE"));
  EXPECT_THAT(sp([](nlohmann::json& j) { j["model"]["unk_token"] = "<nope>"; }),
              HasSubstr("the unk_token '<nope>' is not in the vocabulary"));
  // Gemma's Split(" ", MergedWithPrevious) is read; other Split forms are named.
  auto split = [](nlohmann::json pattern, const char* behavior) {
    return [=](nlohmann::json& j) {
      j["pre_tokenizer"] = {
          {"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", false}};
    };
  };
  EXPECT_THAT(
      sp(split({{"Regex", "\\s+"}}, "MergedWithPrevious")),
      HasSubstr("pre_tokenizer Split with pattern {\"Regex\":\"\\\\s+\"} is not supported"));
  EXPECT_THAT(sp(split({{"String", " "}}, "Isolated")),
              HasSubstr("pre_tokenizer Split behavior 'Isolated' is not supported"));
  EXPECT_THAT(sp(split({{"String", ""}}, "MergedWithPrevious")),
              HasSubstr("pre_tokenizer Split on an empty string"));
  // Byte fallback with a byte-level pre-tokenizer has no meaning here.
  EXPECT_THAT(error_of(edited([](nlohmann::json& j) { j["model"]["byte_fallback"] = true; })),
              HasSubstr("model.byte_fallback with a byte-level pre-tokenizer is not supported"));
  // Without byte tokens or an unk token, a character outside the vocabulary is an error when
  // encoding, naming it.
  const auto tok = make_huggingface_tokenizer(
      edited([](nlohmann::json& j) { j["model"]["byte_fallback"] = false; }, "metaspace_style"));
  EXPECT_THAT([&] { tok->encode("snow \u2603"); },
              ThrowsMessage<InputError>(HasSubstr("the character '\u2603' is in no token")));
}

// Normalizers: an unsupported one, a Regex Replace and malformed settings are refused with the
// file and the key; so is an added token's malformed "normalized".
TEST_F(HuggingFaceTokenizerFiles, UnsupportedNormalizersAreNamed) {
  auto expect_error = [&](const nlohmann::json& normalizer, const std::string& message) {
    const std::string path = edited([&](nlohmann::json& j) { j["normalizer"] = normalizer; });
    const std::string error = error_of(path);
    EXPECT_THAT(error, HasSubstr(path)) << normalizer.dump();
    EXPECT_THAT(error, HasSubstr(message)) << normalizer.dump();
  };
  using nlohmann::json;
  const json nfkc = {{"type", "NFKC"}};
  expect_error({{"type", "Sequence"}, {"normalizers", {nfkc, {{"type", "BertNormalizer"}}}}},
               "normalizer type 'BertNormalizer' (normalizer.normalizers[1]) is not supported");
  expect_error({{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}},
               "normalizer type 'Precompiled' (normalizer) is not supported");
  expect_error({{"type", "Sequence"},
                {"normalizers",
                 {{{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}}}},
               "normalizer.normalizers[0].pattern: Replace with a Regex pattern \"\\\\s+\" is "
               "not supported (String patterns only)");
  expect_error({{"type", "Replace"}, {"pattern", {{"String", "a"}}}},
               "normalizer.content is missing or not a string");
  expect_error({{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", "b"}},
               "normalizer.pattern.String is empty");
  expect_error({{"type", "Replace"}, {"pattern", "a"}, {"content", "b"}},
               "normalizer.pattern is missing or not {\"String\": ...}");
  expect_error({{"type", "Strip"}, {"strip_left", true}},
               "normalizer.strip_right is missing or not true/false");
  expect_error({{"type", "Prepend"}, {"prepend", 3}},
               "normalizer.prepend is missing or not a string");
  expect_error({{"type", "Sequence"}, {"normalizers", nfkc}},
               "normalizer.normalizers is missing or not a list");
  expect_error({{"type", "Sequence"}, {"normalizers", {{{"type", "Sequence"}}}}},
               "normalizer.normalizers[0].normalizers is missing or not a list");
  expect_error(json::array({nfkc}), "normalizer is not an object");
  expect_error({{"typ", "NFC"}}, "normalizer type '?' (normalizer) is not supported");
  expect_error({{"type", 7}}, "normalizer type '?' (normalizer) is not supported");
  EXPECT_THAT(error_of(edited([](json& j) { j["added_tokens"][0]["normalized"] = "yes"; })),
              HasSubstr("added token \"<|begin_of_text|>\": normalized is not true/false"));
  // A normalized=true token must still be something after normalization.
  EXPECT_THAT(
      error_of(edited([](json& j) {
        j["normalizer"] = {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}};
        j["added_tokens"].push_back({{"id", 1000}, {"content", "  "}, {"normalized", true}});
      })),
      HasSubstr("added token \"  \" normalizes to an empty string"));
  // Every supported normalizer loads.
  for (const json& ok : {json{{"type", "NFD"}}, json{{"type", "NFKD"}}, json{{"type", "NFC"}},
                         json{{"type", "Lowercase"}}, json{{"type", "StripAccents"}},
                         json{{"type", "Prepend"}, {"prepend", "\u2581"}}})
    EXPECT_NO_THROW(make_huggingface_tokenizer(edited([&](json& j) { j["normalizer"] = ok; })));
}

}  // namespace
}  // namespace megatron::data
