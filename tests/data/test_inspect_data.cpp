// tools/inspect_data (build/bin/inspect_data): statistics, a sample as ids and text, errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "data/gpt_dataset.h"
#include "data/tokenizer.h"
#include "data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data {
namespace {

using testing::read_text;
using testing::ScratchDir;

struct RunResult {
  int exit_code;
  std::string out, err;
};

RunResult run_inspect(const ScratchDir& dir, const std::string& args) {
  const std::string exe = std::string(MEGATRON_BINARY_DIR) + "/bin/inspect_data";
  if (!std::filesystem::exists(exe)) {
    ADD_FAILURE() << exe << " is not built; build the 'inspect_data' target first";
    return {-1, "", ""};
  }
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  const std::string cmd = "'" + exe + "' " + args + " > '" + out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

// 30 byte-tokenized documents ("doc N: ..." + EOD), one of them empty.
std::string write_corpus(const ScratchDir& dir) {
  const std::string prefix = dir.file("corpus");
  ByteTokenizer tok;
  IndexedDatasetWriter w(prefix, DType::U16);
  for (int d = 0; d < 30; ++d) {
    if (d == 7) {
      w.add_document({});
      continue;
    }
    std::string text = "doc " + std::to_string(d) + ":";
    for (int k = 0; k < d % 5 + 1; ++k) text += " lorem ipsum";
    auto ids = tok.encode(text);
    ids.push_back(ByteTokenizer::kEod);
    w.add_document(ids);
  }
  w.finalize();
  return prefix;
}

TEST(InspectData, Statistics) {
  ScratchDir dir;
  const std::string prefix = write_corpus(dir);
  const auto r = run_inspect(dir, "--data-path '" + prefix + "' --split-weights 8,1,1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  IndexedDataset ds(prefix);
  EXPECT_NE(r.out.find("documents    30 (1 empty)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sequences    29"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens       " + std::to_string(ds.num_tokens())), std::string::npos);
  EXPECT_NE(r.out.find("dtype        uint16 (code 8)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("p50"), std::string::npos);
  EXPECT_NE(r.out.find("histogram"), std::string::npos);
  EXPECT_NE(r.out.find("train sequences [0, 23)"), std::string::npos) << r.out;
}

TEST(InspectData, SampleIdsAndText) {
  ScratchDir dir;
  const std::string prefix = write_corpus(dir);
  const auto r = run_inspect(dir, "--data-path '" + prefix +
                                      "' --split-weights 1 --sample 5 --seq-length 16 --seed 9 "
                                      "--num-samples 40 --tokenizer-type ByteTokenizer");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto src = std::make_shared<IndexedSequenceSource>(prefix);
  GPTDatasetConfig cfg;
  cfg.seq_length = 16;
  cfg.seed = 9;
  cfg.num_samples = 40;
  const auto ds = GPTDataset::build(src, 0, {0, 29}, cfg);
  std::vector<int32_t> ids(17);
  ds->get(5, ids.data());
  std::ostringstream want;
  want << "ids (17):";
  for (int32_t id : ids) want << ' ' << id;
  EXPECT_NE(r.out.find(want.str()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("text:\n" + ByteTokenizer().decode(ids)), std::string::npos) << r.out;
}

TEST(InspectData, Errors) {
  ScratchDir dir;
  const std::string prefix = write_corpus(dir);
  auto r = run_inspect(dir, "--data-path '" + dir.file("nope") + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(dir.file("nope")), std::string::npos) << r.err;
  r = run_inspect(dir, "--data-path '" + prefix + "' --sample 3");
  EXPECT_EQ(r.exit_code, 2);
  r = run_inspect(dir, "--data-path '" + prefix + "' --bogus");
  EXPECT_EQ(r.exit_code, 2);
  r = run_inspect(dir,
                  "--data-path '" + prefix + "' --split-weights 1 --sample 100000 --seq-length 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("out of range"), std::string::npos) << r.err;
  // The test split of 969,30,1 over 29 sequences is empty: [29, 29).
  r = run_inspect(dir, "--data-path '" + prefix + "' --split test --sample 0 --seq-length 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("test split"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace megatron::data
