#pragma once
// JSONL -> Megatron indexed dataset, the engine behind tools/preprocess_data.
//
// Each non-blank input line is a JSON object; for every key in json_keys its string value is
// one document, tokenized and written to {output_prefix}_{key}_document.{bin,idx} (dtype
// uint16 when the vocabulary is below 65500, else int32: Megatron's rule). With append_eod
// the tokenizer's EOD id ends every non-empty document (an empty text stays an empty
// document, as in Megatron). Input is streamed in chunks (bounded memory); `workers` threads
// tokenize a chunk while the main thread reads the next one, and documents are written in
// input order. A line that is not valid JSON, not an object, or lacks a key / has a
// non-string value is an InputError naming the file and line number, unless
// skip_bad_lines, in which case it is counted and skipped (for every key). Whitespace-only
// lines are ignored.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace megatron::data {

struct PreprocessOptions {
  std::vector<std::string> inputs;  // JSONL files, processed in order into one output
  std::vector<std::string> json_keys{"text"};
  TokenizerSpec tokenizer;
  bool append_eod = false;
  int workers = 1;
  std::string output_prefix;
  bool skip_bad_lines = false;
  int64_t log_interval = 1000;    // documents between progress lines (0: none)
  int64_t chunk_lines = 1024;     // lines per chunk
  int64_t chunk_bytes = 2 << 20;  // or this many bytes, whichever comes first
  std::ostream* log = nullptr;    // progress + summary; nullptr: silent
};

struct PreprocessStats {
  int64_t documents = 0;  // JSON lines turned into documents
  int64_t bad_lines = 0;  // skipped with skip_bad_lines
  int64_t input_bytes = 0;
  std::vector<int64_t> tokens;          // per key
  std::vector<std::string> output_prefixes;  // per key: {output_prefix}_{key}_document
  double seconds = 0;
};

PreprocessStats preprocess_jsonl(const PreprocessOptions& options);

}  // namespace megatron::data
