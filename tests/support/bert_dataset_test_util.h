#pragma once
// Helpers shared by the BERT dataset tests (tests/data/test_bert_dataset*.cpp): the real
// bert-base-uncased tokenizer and its token info, a silent log, and running a built tool
// (preprocess_data, inspect_data) with its exit code and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "data/bert_dataset.h"
#include "data/tokenizer.h"
#include "tests/data/data_test_util.h"
#include "tests/support/test_paths.h"

namespace megatron::data::testing {

inline const std::string kSource = MEGATRON_SOURCE_DIR;
inline const std::string kVocab = kSource + "/tokenizers/bert-base-uncased/vocab.txt";

inline const Tokenizer& bert_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok =
      make_tokenizer({config::TokenizerType::BertWordPieceLowerCase, kVocab, "", ""});
  return *tok;
}

inline const BertTokenInfo& bert_info() {
  static const BertTokenInfo info = BertTokenInfo::from_tokenizer(bert_tokenizer());
  return info;
}

inline void quiet(const std::string&) {}

struct RunResult {
  int exit_code;
  std::string out, err;
};

inline RunResult run_tool(const ScratchDir& dir, const std::string& tool, const std::string& args) {
  const std::string exe = std::string(MEGATRON_BINARY_DIR) + "/bin/" + tool;
  if (!std::filesystem::exists(exe)) {
    ADD_FAILURE() << exe << " is not built; build the '" << tool << "' target first";
    return {-1, "", ""};
  }
  const std::string out = dir.file(tool + ".out"), err = dir.file(tool + ".err");
  const std::string cmd = "'" + exe + "' " + args + " > '" + out + "' 2> '" + err + "'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(out), read_text(err)};
}

}  // namespace megatron::data::testing
