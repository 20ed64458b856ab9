// GPT2BPETokenizer: known ids, the reference fixture (tests/fixtures/gpt2_expected.jsonl, made by
// tools/gen_tokenizer_fixtures.py), pre-tokenization, thread safety, bad files, the shipped
// corpus (round trip + throughput) and preprocess_data end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
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
const std::string kVocab = kSrc + "tokenizers/gpt2/vocab.json";
const std::string kMerges = kSrc + "tokenizers/gpt2/merges.txt";

std::unique_ptr<Tokenizer> gpt2() {
  return make_tokenizer({config::TokenizerType::GPT2BPE, kVocab, kMerges, ""});
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

struct Case {
  std::string text;  // raw bytes (not valid UTF-8 when from_hex)
  bool from_hex = false;
  std::vector<int32_t> ids;
};

std::vector<Case> load_fixture() {
  std::ifstream in(kSrc + "tests/fixtures/gpt2_expected.jsonl");
  EXPECT_TRUE(in.is_open());
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    Case c;
    if (j.contains("hex")) {
      c.text = from_hex(j.at("hex").get<std::string>());
      c.from_hex = true;
    } else {
      c.text = j.at("text").get<std::string>();
    }
    c.ids = j.at("ids").get<std::vector<int32_t>>();
    cases.push_back(std::move(c));
  }
  return cases;
}

TEST(GPT2BPETokenizer, KnownIds) {
  const auto tok = gpt2();
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->eod(), 50256);
  EXPECT_EQ(tok->eos(), 50256);
  EXPECT_EQ(tok->bos(), -1);
  EXPECT_EQ(tok->pad(), -1);
  EXPECT_EQ(tok->cls(), -1);
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok->encode(" Hello world"), (std::vector<int32_t>{18435, 995}));
  EXPECT_EQ(tok->decode({50256}), "<|endoftext|>");
  // Like the reference encoder, the literal text is not the special token.
  EXPECT_EQ(tok->encode("<|endoftext|>"), (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_NE(tok->describe().find("vocab 50257"), std::string::npos);
}

TEST(GPT2BPETokenizer, MatchesReferenceFixture) {
  const auto tok = gpt2();
  const auto cases = load_fixture();
  ASSERT_GT(cases.size(), 400u);
  size_t n_hex = 0, n_long = 0;
  for (const auto& c : cases) {
    EXPECT_EQ(tok->encode(c.text), c.ids) << "text: " << c.text;
    const std::string expected_text = c.from_hex ? unicode::replace_invalid_utf8(c.text) : c.text;
    EXPECT_EQ(tok->decode(c.ids), expected_text);
    n_hex += c.from_hex;
    n_long += c.text.size() > 1000;
  }
  EXPECT_GE(n_hex, 10u);
  EXPECT_GE(n_long, 3u);
  // Twice: the second pass answers from the BPE cache.
  for (const auto& c : cases) EXPECT_EQ(tok->encode(c.text), c.ids) << "text: " << c.text;
}

TEST(GPT2BPETokenizer, InvalidUtf8IsReplacedNotFatal) {
  const auto tok = gpt2();
  // One U+FFFD per maximal ill-formed subpart, as Python's decode(errors="replace").
  EXPECT_EQ(tok->encode("\xe2\x82"), tok->encode("\xef\xbf\xbd"));
  EXPECT_EQ(tok->encode("\xed\xa0\x80"), tok->encode("\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"));
  EXPECT_EQ(tok->decode(tok->encode("a\xff")), "a\xef\xbf\xbd");
  // Decoding ids that split a character also replaces (the reference's errors="replace").
  const auto ids = tok->encode("\xe6\x97\xa5");  // one CJK character, several byte tokens
  ASSERT_GT(ids.size(), 1u);
  EXPECT_EQ(tok->decode({ids[0]}), "\xef\xbf\xbd");
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    EXPECT_EQ(tok->encode(s).size(), 1u) << b;
  }
}

TEST(GPT2BPETokenizer, PreTokenization) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("a   b\n"), (V{"a", "  ", " b", "\n"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("I'm here"), (V{"I", "'m", " here"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("  x  "), (V{" ", " x", "  "}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("IT'S"), (V{"IT", "'", "S"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("x's ''s 'll"), (V{"x", "'s", " ''", "s", " '", "ll"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("a \t b"), (V{"a", " \t", " b"}));
  EXPECT_EQ(GPT2BPETokenizer::pretokenize("12ab!? \xc3\xa9t\xc3\xa9 \xe2\x82\xac"
                                          "5"),
            (V{"12", "ab", "!?", " \xc3\xa9t\xc3\xa9", " \xe2\x82\xac", "5"}));
  EXPECT_TRUE(GPT2BPETokenizer::pretokenize("").empty());
}

TEST(GPT2BPETokenizer, ConcurrentEncodeOnOneInstance) {
  const auto tok = gpt2();
  const auto cases = load_fixture();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = static_cast<size_t>(t); i < cases.size(); i += 2)
          mismatches[t] += tok->encode(cases[i].text) != cases[i].ids;
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(GPT2BPETokenizer, DecodeRejectsOutOfRangeIds) {
  const auto tok = gpt2();
  expect_input_error([&] { tok->decode({1, 50257}); }, {"50257", kVocab});
  expect_input_error([&] { tok->decode({-1}); }, {"-1"});
}

// Found by fuzz_tokenizer_files: a number JSON cannot hold (1e999) made the JSON library throw
// out_of_range, which escaped as a crash; it is an error naming the file.
TEST(GPT2BPETokenizer, OutOfRangeNumbersInTheVocabAreInputErrors) {
  ScratchDir dir;
  const std::string v = dir.file("vocab.json"), m = dir.file("merges.txt");
  write_text(v, "{\"a\": 1e999}");
  write_text(m, "#version: 0.2\n");
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::GPT2BPE, v, m, ""});
      },
      {v, "not valid JSON"});
}

TEST(GPT2BPETokenizer, BadFilesNameFileAndLine) {
  ScratchDir dir;
  const std::string v = dir.file("vocab.json"), m = dir.file("merges.txt");
  // A tiny but complete byte-level vocabulary: the 256 byte symbols, "ab", "<|endoftext|>".
  auto byte_symbol = [](int b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int extra = 0;
    for (int k = 0; k < b; ++k)
      if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE)) ++extra;
    std::string s;
    unicode::append_utf8(printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra),
                         s);
    return s;
  };
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_symbol(b)] = b;
  vocab["ab"] = 256;
  vocab["<|endoftext|>"] = 257;
  write_text(v, vocab.dump());
  write_text(m, "#version: 0.2\na b\n");
  {
    const GPT2BPETokenizer tok(v, m);
    EXPECT_EQ(tok.vocab_size(), 258);
    EXPECT_EQ(tok.eod(), 257);
    EXPECT_EQ(tok.encode("abab"), (std::vector<int32_t>{256, 256}));
    EXPECT_EQ(tok.decode({256, 'c', 257}), "abc<|endoftext|>");
  }
  auto make = [&] { make_tokenizer({config::TokenizerType::GPT2BPE, v, m, ""}); };
  // No merges at all (empty, or only the version line): every word would fall apart into bytes.
  write_text(m, "");
  expect_input_error(make, {m, "has no merges"});
  write_text(m, "#version: 0.2\n\n");
  expect_input_error(make, {m, "has no merges"});
  // Merges: one token, three tokens, unknown symbols, unknown merged token.
  write_text(m, "#version: 0.2\na b\nc\n");
  expect_input_error(make, {m, "line 3", "two"});
  write_text(m, "#version: 0.2\na b c\n");
  expect_input_error(make, {m, "line 2"});
  write_text(m, "#version: 0.2\na b\n\xe2\x82\xac b\n");
  expect_input_error(make, {m, "line 3", "\xe2\x82\xac", "not in the vocab"});
  write_text(m, "#version: 0.2\nb c\n");
  expect_input_error(make, {m, "line 2", "merged token", "bc"});
  write_text(m, "#version: 0.2\na b\n");
  // Vocab: malformed JSON, not an object, bad ids, missing tokens, missing file.
  write_text(v, "{\"a\": 0,\n \"b\": }");
  expect_input_error(make, {v, "not valid JSON", "line 2"});
  write_text(v, "[1, 2]");
  expect_input_error(make, {v, "JSON object"});
  nlohmann::json bad = vocab;
  bad["ab"] = "x";
  write_text(v, bad.dump());
  expect_input_error(make, {v, "'ab'", "non-integer"});
  bad = vocab;
  bad["ab"] = 1000;
  write_text(v, bad.dump());
  expect_input_error(make, {v, "'ab'", "1000"});
  bad = vocab;
  bad["ab"] = 5;
  write_text(v, bad.dump());
  expect_input_error(make, {v, "id 5"});
  bad = vocab;
  bad.erase("<|endoftext|>");
  bad["ab"] = 256;
  write_text(v, bad.dump());
  expect_input_error(make, {v, "<|endoftext|>"});
  bad = vocab;
  bad.erase("a");
  bad["<|endoftext|>"] = 'a';
  write_text(v, bad.dump());
  expect_input_error(make, {v, "single-byte token 'a'"});
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::GPT2BPE, dir.file("none.json"), m, ""});
      },
      {dir.file("none.json")});
  write_text(v, vocab.dump());
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::GPT2BPE, v, dir.file("none.txt"), ""});
      },
      {dir.file("none.txt")});
  expect_input_error(
      [&] {
        make_tokenizer({config::TokenizerType::GPT2BPE, v, "", ""});
      },
      {"merge"});
}

std::vector<std::string> corpus_documents() {
  std::vector<std::string> docs;
  for (const char* f : {"data/corpus/austen.jsonl", "data/corpus/kjv.jsonl"}) {
    std::ifstream in(kSrc + f);
    std::string line;
    while (std::getline(in, line)) docs.push_back(nlohmann::json::parse(line).at("text"));
  }
  return docs;
}

TEST(GPT2BPETokenizer, CorpusRoundTripAndThroughput) {
  const auto docs = corpus_documents();
  ASSERT_EQ(docs.size(), 1460u);
  double bytes = 0;
  for (const auto& d : docs) bytes += static_cast<double>(d.size());
  const auto tok = gpt2();  // a fresh (cold) cache
  int64_t tokens = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(docs.size());
  for (const auto& d : docs) {
    ids.push_back(tok->encode(d));
    tokens += static_cast<int64_t>(ids.back().size());
  }
  const double cold = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto t1 = std::chrono::steady_clock::now();
  for (const auto& d : docs) tokens -= static_cast<int64_t>(tok->encode(d).size());
  const double warm = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(tokens, 0);
  int64_t total = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    ASSERT_EQ(tok->decode(ids[i]), docs[i]) << "document " << i;
    total += static_cast<int64_t>(ids[i].size());
  }
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "GPT-2 encode of the corpus (%.1f MB, 1 thread): %.2f MB/s cold cache, %.2f MB/s "
                "warm; %.2f M tokens, %.2f M tokens/s cold",
                bytes / 1e6, bytes / 1e6 / cold, bytes / 1e6 / warm,
                static_cast<double>(total) / 1e6, static_cast<double>(total) / 1e6 / cold);
  std::printf("%s\n", buf);
  RecordProperty("throughput", buf);
}

// ---- preprocess_data end to end ---------------------------------------------------------------

int run_preprocess(const ScratchDir& dir, const std::string& args, std::string& err) {
  const std::string exe = std::string(MEGATRON_BINARY_DIR) + "/bin/preprocess_data";
  if (!std::filesystem::exists(exe)) {
    ADD_FAILURE() << exe << " is not built; build the 'preprocess_data' target first";
    return -1;
  }
  const std::string err_file = dir.file("stderr.txt");
  const int status =
      std::system(("'" + exe + "' " + args + " > /dev/null 2> '" + err_file + "'").c_str());
  err = testing::read_text(err_file);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(GPT2BPETokenizer, PreprocessDataEndToEndMatchesFixture) {
  ScratchDir dir;
  std::vector<Case> cases;
  for (auto& c : load_fixture())
    if (!c.from_hex) cases.push_back(std::move(c));
  std::string jsonl;
  for (const auto& c : cases) jsonl += nlohmann::json({{"text", c.text}}).dump() + "\n";
  write_text(dir.file("in.jsonl"), jsonl);
  std::string err;
  const int rc =
      run_preprocess(dir,
                     "--input " + dir.file("in.jsonl") + " --output-prefix " + dir.file("out") +
                         " --tokenizer-type GPT2BPETokenizer --vocab-file " + kVocab +
                         " --merge-file " + kMerges + " --append-eod --workers 2 --log-interval 0",
                     err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("GPT2BPETokenizer"), std::string::npos) << err;
  const IndexedDataset ds(dir.file("out_text_document"));
  EXPECT_EQ(ds.dtype(), DType::U16);
  ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(cases.size()));
  int64_t seq = 0;
  for (const auto& c : cases) {
    if (c.ids.empty()) continue;  // an empty text is an empty document (no sequence)
    std::vector<int32_t> expected = c.ids;
    expected.push_back(50256);
    ASSERT_EQ(ds.read(seq), expected) << "text: " << c.text;
    ++seq;
  }
  EXPECT_EQ(ds.num_sequences(), seq);
  // Missing files are input errors naming the file.
  const int rc2 =
      run_preprocess(dir,
                     "--input " + dir.file("in.jsonl") + " --output-prefix " + dir.file("o2") +
                         " --tokenizer-type GPT2BPETokenizer --vocab-file " +
                         dir.file("nope.json") + " --merge-file " + kMerges,
                     err);
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(err.find(dir.file("nope.json")), std::string::npos) << err;
}

}  // namespace
}  // namespace megatron::data
