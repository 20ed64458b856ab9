#pragma once
// A whole (small) input file as a string, for the tokenizers' vocabulary and config files:
// InputErrors name `what` and the path ("GPT-2 vocab file (vocab.json) 'x' does not exist ...").
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "megatron/core/error.h"

namespace megatron::data {

inline std::string read_input_file(const std::string& path, const std::string& what) {
  MT_INPUT_CHECK(std::filesystem::is_regular_file(path), what, " '", path,
                 "' does not exist or is not a regular file");
  std::ifstream in(path, std::ios::binary);
  MT_INPUT_CHECK(in.is_open(), "cannot open ", what, " '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  MT_INPUT_CHECK(!in.bad(), "read error on ", what, " '", path, "'");
  return ss.str();
}

}  // namespace megatron::data
