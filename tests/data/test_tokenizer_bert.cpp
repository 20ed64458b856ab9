// BertWordPieceLowerCase / BertWordPieceCase: special ids, hand-checked encodings, the reference
// fixture (tests/fixtures/bert_expected.jsonl, made by tools/gen_tokenizer_fixtures.py), the
// Unicode helpers they rest on, bad vocab files, and preprocess_data with a BERT vocabulary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "data/tokenizer_unicode.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

using testing::expect_input_error;
using testing::ScratchDir;
using testing::write_text;

const std::string kSrc = std::string(MEGATRON_SOURCE_DIR) + "/";
const std::string kVocab = kSrc + "tokenizers/bert-base-uncased/vocab.txt";

std::unique_ptr<Tokenizer> uncased() {
  return make_tokenizer({config::TokenizerType::BertWordPieceLowerCase, kVocab, "", ""});
}
std::unique_ptr<Tokenizer> cased() {
  return make_tokenizer({config::TokenizerType::BertWordPieceCase, kVocab, "", ""});
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(BertWordPiece, SpecialIds) {
  for (const auto& tok : {uncased(), cased()}) {
    EXPECT_EQ(tok->vocab_size(), 30522);
    EXPECT_EQ(tok->pad(), 0);
    EXPECT_EQ(tok->unk(), 100);
    EXPECT_EQ(tok->cls(), 101);
    EXPECT_EQ(tok->sep(), 102);
    EXPECT_EQ(tok->mask(), 103);
    EXPECT_EQ(tok->eod(), tok->sep());
    EXPECT_EQ(tok->bos(), -1);
    EXPECT_EQ(tok->eos(), -1);
  }
  EXPECT_NE(uncased()->describe().find("BertWordPieceLowerCase"), std::string::npos);
  EXPECT_NE(cased()->describe().find("BertWordPieceCase"), std::string::npos);
}

TEST(BertWordPiece, HandCheckedEncodings) {
  const BertWordPieceTokenizer lower(kVocab, true), keep(kVocab, false);
  using S = std::vector<std::string>;
  using I = std::vector<int32_t>;
  // No [CLS]/[SEP] are added by encode.
  EXPECT_EQ(lower.tokenize("Hello, World!"), (S{"hello", ",", "world", "!"}));
  EXPECT_EQ(lower.encode("Hello, World!"), (I{7592, 1010, 2088, 999}));
  EXPECT_EQ(keep.encode("Hello, World!"), (I{100, 1010, 100, 999}));  // no capitals in the vocab
  EXPECT_EQ(lower.tokenize("unaffable"), (S{"una", "##ffa", "##ble"}));
  EXPECT_EQ(lower.tokenize("UNwant\xc3\xa9"
                           "d,running"),
            (S{"unwanted", ",", "running"}));
  EXPECT_EQ(lower.tokenize("I'm"), (S{"i", "'", "m"}));
  // Final sigma (Python's str.lower()): "ΣΑΣ" -> "σας".
  EXPECT_EQ(lower.tokenize("\xce\xa3\xce\x91\xce\xa3"),
            (S{"\xcf\x83", "##\xce\xb1", "##\xcf\x82"}));
  // CJK ideographs are split out; one missing from the vocab is [UNK].
  EXPECT_EQ(lower.tokenize("\xe6\x88\x91\xe7\x88\xb1\xe5\x8c\x97\xe4\xba\xac"),
            (S{"\xe6\x88\x91", "[UNK]", "\xe5\x8c\x97", "\xe4\xba\xac"}));
  // Control characters vanish, whitespace of any kind separates.
  EXPECT_EQ(lower.tokenize("a\x01"
                           "b\tc\xe2\x80\x83"
                           "d\xe2\x80\xa8"
                           "e"),
            (S{"ab", "c", "d", "e"}));
  EXPECT_TRUE(lower.encode("").empty());
  EXPECT_TRUE(lower.encode(" \n\t ").empty());
  // Words over 200 code points are [UNK]; 200 are not.
  EXPECT_EQ(lower.encode(std::string(201, 'a')), (I{100}));
  EXPECT_NE(lower.encode(std::string(200, 'a')), (I{100}));
  // Decode: Megatron's convert_tokens_to_string.
  EXPECT_EQ(lower.decode(lower.encode("Hello, World! I'm unaffable.")),
            "hello, world! i'm unaffable.");
  EXPECT_EQ(lower.decode({101, 7592, 102}), "[CLS] hello [SEP]");
  expect_input_error([&] { lower.decode({30522}); }, {"30522", kVocab});
  expect_input_error([&] { lower.decode({-1}); }, {"-1"});
}

TEST(BertWordPiece, MatchesReferenceFixture) {
  const auto lower = uncased();
  const auto keep = cased();
  std::ifstream in(kSrc + "tests/fixtures/bert_expected.jsonl");
  ASSERT_TRUE(in.is_open());
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string text = j.contains("hex") ? from_hex(j.at("hex").get<std::string>())
                                               : j.at("text").get<std::string>();
    const auto expected = j.at("uncased").get<std::vector<int32_t>>();
    EXPECT_EQ(lower->encode(text), expected) << "text: " << text;
    EXPECT_EQ(keep->encode(text), j.at("cased").get<std::vector<int32_t>>()) << "text: " << text;
    EXPECT_EQ(lower->decode(expected), j.at("decoded_uncased").get<std::string>())
        << "text: " << text;
    ++n;
  }
  EXPECT_GT(n, 400u);
}

TEST(BertWordPiece, ConcurrentEncode) {
  const auto tok = uncased();
  const std::string text =
      "It is a truth universally acknowledged, that a single man in "
      "possession of a good fortune, must be in want of a wife.";
  const auto expected = tok->encode(text);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) bad[t] += tok->encode(text) != expected;
    });
  for (auto& th : threads) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}

TEST(BertWordPiece, BadVocabFiles) {
  ScratchDir dir;
  const std::string v = dir.file("vocab.txt");
  auto make = [&] { make_tokenizer({config::TokenizerType::BertWordPieceLowerCase, v, "", ""}); };
  write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\r\n  world  \n");
  {
    const BertWordPieceTokenizer tok(v, true);
    EXPECT_EQ(tok.vocab_size(), 8);
    EXPECT_EQ(tok.tokenize("Hellos WORLD x"),
              (std::vector<std::string>{"hello", "##s", "world", "[UNK]"}));
  }
  write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  expect_input_error(make, {v, "[MASK]"});
  write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n");
  expect_input_error(make, {v, "line 7", "hello", "line 6"});
  write_text(v, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nbad\xff\n");
  expect_input_error(make, {v, "line 6", "UTF-8"});
  write_text(v, "");
  expect_input_error(make, {v, "empty"});
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::BertWordPieceCase, dir.file("none.txt"), "", ""});
      },
      {dir.file("none.txt")});
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::BertWordPieceCase, "", "", ""});
      },
      {"vocab"});
  expect_input_error([&] { parse_tokenizer_type("BertWordPiece"); },
                     {"BertWordPiece", "unknown", "BertWordPieceLowerCase"});
}

TEST(Unicode, TablesAndHelpers) {
  using unicode::GeneralCategory;
  EXPECT_STREQ(unicode::unicode_version(), "14.0.0");
  EXPECT_EQ(unicode::general_category(U'a'), GeneralCategory::Ll);
  EXPECT_EQ(unicode::general_category(U'\u00e9'), GeneralCategory::Ll);
  EXPECT_EQ(unicode::general_category(U'\u4e00'), GeneralCategory::Lo);
  EXPECT_EQ(unicode::general_category(U'\u0301'), GeneralCategory::Mn);
  EXPECT_EQ(unicode::general_category(U'\u0663'), GeneralCategory::Nd);
  EXPECT_EQ(unicode::general_category(U'\u2014'), GeneralCategory::Pd);
  EXPECT_EQ(unicode::general_category(U'\U0001F642'), GeneralCategory::So);
  EXPECT_EQ(unicode::general_category(0x10FFFF), GeneralCategory::Cn);
  EXPECT_EQ(unicode::general_category(0x110000), GeneralCategory::Cn);
  EXPECT_TRUE(unicode::is_white_space(0x3000));
  EXPECT_FALSE(unicode::is_white_space(0x1C));
  EXPECT_TRUE(unicode::is_python_space(0x1C));
  EXPECT_FALSE(unicode::is_white_space(0x200B));
  std::u32string out;
  unicode::append_nfd(U"\u00e9\uac01\u1e69", out);  // é, 각 (Hangul LVT), ṩ (two marks, reordered)
  EXPECT_EQ(out, (std::u32string{U'e', 0x301, 0x1100, 0x1161, 0x11A8, U's', 0x323, 0x307}));
  out.clear();
  unicode::append_nfd(U"a\u0301\u0323", out);  // canonical ordering: 0323 (220) before 0301 (230)
  EXPECT_EQ(out, (std::u32string{U'a', 0x323, 0x301}));
  out.clear();
  unicode::append_lower(U"\u0130X\u03a3\u03a3 \u03a3", out);
  EXPECT_EQ(out, (std::u32string{U'i', 0x307, U'x', 0x3C3, 0x3C2, U' ', 0x3C3}));
  EXPECT_EQ(unicode::replace_invalid_utf8("a\xc3(\xf0\x9f\x98\xff"),
            "a\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(unicode::find_invalid_utf8("valid \xe2\x82\xac text"), std::string_view::npos);
  EXPECT_EQ(unicode::find_invalid_utf8("12345678\xc0\x80"), 8u);
}

TEST(BertWordPiece, PreprocessDataWithBertVocab) {
  ScratchDir dir;
  write_text(dir.file("in.jsonl"),
             "{\"text\": \"Hello, World!\"}\n{\"text\": \"\"}\n{\"text\": \"unaffable\"}\n");
  const std::string exe = std::string(MEGATRON_BINARY_DIR) + "/bin/preprocess_data";
  ASSERT_TRUE(std::filesystem::exists(exe)) << "build the 'preprocess_data' target first";
  const std::string cmd = "'" + exe + "' --input " + dir.file("in.jsonl") + " --output-prefix " +
                          dir.file("out") +
                          " --tokenizer-type BertWordPieceLowerCase --vocab-file " + kVocab +
                          " --append-eod --log-interval 0 2> " + dir.file("err.txt");
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << testing::read_text(dir.file("err.txt"));
  const IndexedDataset ds(dir.file("out_text_document"));
  EXPECT_EQ(ds.num_documents(), 3);
  ASSERT_EQ(ds.num_sequences(), 2);
  EXPECT_EQ(ds.read(0), (std::vector<int32_t>{7592, 1010, 2088, 999, 102}));
  EXPECT_EQ(ds.read(1), (std::vector<int32_t>{14477, 20961, 3468, 102}));
}

}  // namespace
}  // namespace megatron::data
