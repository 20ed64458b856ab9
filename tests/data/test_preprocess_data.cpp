// preprocess_data / merge_datasets end to end (the built binaries, run through std::system),
// plus the in-process engine with tiny chunks to check ordering across threads.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

using testing::read_text;
using testing::ScratchDir;
using testing::write_text;

const std::string kBin = std::string(MEGATRON_BINARY_DIR) + "/bin/";
const std::string kModel = std::string(MEGATRON_SOURCE_DIR) + "/tokenizers/corpus_spm_8k.model";

struct RunResult {
  int exit_code;
  std::string err;
};

// Runs a tool from the build tree with the given arguments; stderr is captured.
RunResult run_tool(const ScratchDir& dir, const std::string& tool, const std::string& args) {
  const std::string exe = kBin + tool;
  if (!std::filesystem::exists(exe)) {
    ADD_FAILURE() << exe << " is not built; build the '" << tool << "' target first";
    return {-1, ""};
  }
  const std::string err_file = dir.file(tool + ".stderr");
  const std::string cmd = "'" + exe + "' " + args + " > /dev/null 2> '" + err_file + "'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(err_file)};
}

std::string jsonl(const std::vector<std::string>& texts) {
  std::string out;
  for (const auto& t : texts)
    out += nlohmann::json({{"text", t}, {"title", "T:" + t}}).dump() + "\n";
  return out;
}

const std::vector<std::string> kTexts = {
    "Hello world.", "", "caf\xc3\xa9 \xf0\x9f\x99\x82\nline two",
    "In the beginning God created the heaven and the earth.", "last"};

TEST(PreprocessData, ByteTokenizerEndToEnd) {
  ScratchDir dir;
  write_text(dir.file("in.jsonl"), jsonl(kTexts));
  const auto r =
      run_tool(dir, "preprocess_data",
               "--input " + dir.file("in.jsonl") + " --output-prefix " + dir.file("out") +
                   " --tokenizer-type ByteTokenizer --json-keys text title --append-eod "
                   "--workers 3 --log-interval 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("docs/s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("MB/s"), std::string::npos) << r.err;
  for (const std::string key : {"text", "title"}) {
    const IndexedDataset ds(dir.file("out_" + key + "_document"));
    EXPECT_EQ(ds.dtype(), DType::U16);
    ASSERT_EQ(ds.num_documents(), 5);
    int64_t seq = 0;
    for (size_t d = 0; d < kTexts.size(); ++d) {
      const std::string text = key == "text" ? kTexts[d] : "T:" + kTexts[d];
      if (text.empty()) {
        EXPECT_EQ(ds.document_indices()[d + 1], ds.document_indices()[d]);
        continue;
      }
      std::vector<int32_t> expect(text.begin(), text.end());
      for (auto& t : expect) t &= 0xff;
      expect.push_back(256);  // EOD
      EXPECT_EQ(ds.read(seq++), expect);
    }
  }
}

TEST(PreprocessData, SentencePieceEndToEndRoundTrips) {
  ScratchDir dir;
  write_text(dir.file("in.jsonl"), jsonl(kTexts));
  const auto r = run_tool(
      dir, "preprocess_data",
      "--input " + dir.file("in.jsonl") + " --output-prefix " + dir.file("out") +
          " --tokenizer-type SentencePieceTokenizer --tokenizer-model " + kModel + " --append-eod");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto tok = make_tokenizer({config::TokenizerType::SentencePiece, "", "", kModel});
  const IndexedDataset ds(dir.file("out_text_document"));
  EXPECT_EQ(ds.dtype(), DType::U16);
  ASSERT_EQ(ds.num_sequences(), 4);
  int64_t seq = 0;
  for (const auto& t : kTexts) {
    if (t.empty()) continue;
    auto ids = ds.read(seq++);
    ASSERT_EQ(ids.back(), tok->eod());
    ids.pop_back();
    EXPECT_EQ(tok->decode(ids), t);
  }
}

TEST(PreprocessData, BadJsonLineNamesFileAndLine) {
  ScratchDir dir;
  const std::string in = dir.file("bad.jsonl");
  write_text(
      in, "{\"text\": \"ok\"}\n\n{\"text\": \"fine\"}\n{\"text\": broken\n{\"text\": \"after\"}\n");
  auto r = run_tool(
      dir, "preprocess_data",
      "--input " + in + " --output-prefix " + dir.file("out") + " --tokenizer-type ByteTokenizer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(in + ":4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("invalid JSON"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out_text_document.idx")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("out_text_document.bin.tmp")));

  write_text(in, "{\"text\": \"ok\"}\n{\"body\": \"no text key\"}\n");
  r = run_tool(
      dir, "preprocess_data",
      "--input " + in + " --output-prefix " + dir.file("out") + " --tokenizer-type ByteTokenizer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(in + ":2:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("key 'text' is missing"), std::string::npos) << r.err;

  write_text(in, "{\"text\": 5}\n[1]\n{\"text\": \"good\"}\nnot json\n");
  r = run_tool(dir, "preprocess_data",
               "--input " + in + " --output-prefix " + dir.file("out") +
                   " --tokenizer-type ByteTokenizer --skip-bad-lines");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("skipped 3 bad line"), std::string::npos) << r.err;
  const IndexedDataset ds(dir.file("out_text_document"));
  EXPECT_EQ(ds.num_documents(), 1);
  EXPECT_EQ(ds.read(0), (std::vector<int32_t>{'g', 'o', 'o', 'd'}));
}

TEST(PreprocessData, UsageAndInputErrors) {
  ScratchDir dir;
  write_text(dir.file("in.jsonl"), jsonl({"a"}));
  const std::string io = "--input " + dir.file("in.jsonl") + " --output-prefix " + dir.file("out");
  auto r = run_tool(dir, "preprocess_data", io + " --tokenizer-type ByteTokenizer --bogus-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--bogus-flag"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("usage:"), std::string::npos) << r.err;
  r = run_tool(dir, "preprocess_data", io + " --tokenizer-type ByteTokenizer --workers");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--workers"), std::string::npos) << r.err;
  r = run_tool(dir, "preprocess_data", io + " --tokenizer-type ByteTokenizer --workers zero");
  EXPECT_EQ(r.exit_code, 2);
  // Absurd thread counts are refused (not an abort), leaving nothing behind.
  r = run_tool(dir, "preprocess_data", io + " --tokenizer-type ByteTokenizer --workers 100000");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--workers: at most 1024"), std::string::npos) << r.err;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find("out"), std::string::npos) << e.path();
  r = run_tool(dir, "preprocess_data", io);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--tokenizer-type"), std::string::npos) << r.err;
  r = run_tool(dir, "preprocess_data", io + " --tokenizer-type NullTokenizer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("NullTokenizer reads no text"), std::string::npos) << r.err;
  r = run_tool(dir, "preprocess_data", io + " --tokenizer-type Tiktoken");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("unknown tokenizer type 'Tiktoken' (expected one of GPT2BPETokenizer"),
            std::string::npos)
      << r.err;
  r = run_tool(dir, "preprocess_data",
               io + " --tokenizer-type GPT2BPETokenizer --vocab-file v --merge-file m");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'v' does not exist"), std::string::npos) << r.err;
  r = run_tool(dir, "preprocess_data",
               "--input " + dir.file("missing.jsonl") + " --output-prefix " + dir.file("o") +
                   " --tokenizer-type ByteTokenizer");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(dir.file("missing.jsonl")), std::string::npos) << r.err;
  r = run_tool(
      dir, "preprocess_data",
      io + " --tokenizer-type SentencePieceTokenizer --tokenizer-model " + dir.file("x.model"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(dir.file("x.model")), std::string::npos) << r.err;
}

TEST(PreprocessData, ManyWorkersSmallChunksKeepInputOrder) {
  ScratchDir dir;
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i)
    texts.push_back("document number " + std::to_string(i) + std::string(i % 13, 'x'));
  texts[17].clear();
  write_text(dir.file("a.jsonl"),
             jsonl(std::vector<std::string>(texts.begin(), texts.begin() + 150)));
  write_text(dir.file("b.jsonl"),
             jsonl(std::vector<std::string>(texts.begin() + 150, texts.end())));
  PreprocessOptions opt;
  opt.inputs = {dir.file("a.jsonl"), dir.file("b.jsonl")};
  opt.tokenizer = {config::TokenizerType::Byte, "", "", ""};
  opt.output_prefix = dir.file("out");
  opt.workers = 4;
  opt.chunk_lines = 7;
  opt.append_eod = true;
  const auto stats = preprocess_jsonl(opt);
  EXPECT_EQ(stats.documents, 300);
  const IndexedDataset ds(dir.file("out_text_document"));
  ASSERT_EQ(ds.num_documents(), 300);
  ASSERT_EQ(ds.num_sequences(), 299);
  int64_t seq = 0;
  for (const auto& t : texts) {
    if (t.empty()) continue;
    const auto ids = ds.read(seq++);
    ASSERT_EQ(std::string(ids.begin(), ids.end() - 1), t);
  }
  EXPECT_EQ(stats.tokens[0], ds.num_tokens());
}

TEST(MergeDatasets, JoinsPrefixesInOrder) {
  ScratchDir dir;
  write_text(dir.file("a.jsonl"), jsonl({"one", "", "two"}));
  write_text(dir.file("b.jsonl"), jsonl({"three"}));
  for (const std::string n : {"a", "b"}) {
    const auto r = run_tool(dir, "preprocess_data",
                            "--input " + dir.file(n + ".jsonl") + " --output-prefix " +
                                dir.file(n) + " --tokenizer-type ByteTokenizer --append-eod");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto r = run_tool(dir, "merge_datasets",
                    "--input " + dir.file("a_text_document") + " " + dir.file("b_text_document") +
                        " --output-prefix " + dir.file("m"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const IndexedDataset m(dir.file("m"));
  EXPECT_EQ(m.num_documents(), 4);
  EXPECT_EQ(m.num_sequences(), 3);
  EXPECT_EQ(std::vector<int64_t>(m.document_indices().begin(), m.document_indices().end()),
            (std::vector<int64_t>{0, 1, 1, 2, 3}));
  EXPECT_EQ(m.read(2), (std::vector<int32_t>{'t', 'h', 'r', 'e', 'e', 256}));

  r = run_tool(dir, "merge_datasets",
               "--input " + dir.file("nope") + " --output-prefix " + dir.file("m2"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(dir.file("nope.idx")), std::string::npos) << r.err;
  r = run_tool(dir, "merge_datasets", "--output-prefix " + dir.file("m2"));
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace megatron::data
