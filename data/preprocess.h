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
//
// With split_sentences (Megatron's --split-sentences) every document is first cut into sentences
// by split_sentences() below; each sentence is tokenized on its own and becomes one sequence
// (a sentence that tokenizes to nothing is dropped), the document's sentences form one document
// of the index, the EOD (append_eod) extends the document's last sentence, and the outputs are
// {output_prefix}_{key}_sentence.{bin,idx} (Megatron's "sentence" level) - the input of
// BERTDataset.
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace megatron::data {

struct PreprocessOptions {
  std::vector<std::string> inputs;  // JSONL files, processed in order into one output
  std::vector<std::string> json_keys{"text"};
  TokenizerSpec tokenizer;
  bool append_eod = false;
  bool split_sentences = false;  // one sequence per sentence, outputs *_sentence.{bin,idx}
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
  std::vector<int64_t> tokens;               // per key
  std::vector<int64_t> sequences;            // per key (sentences with split_sentences)
  std::vector<std::string> output_prefixes;  // per key: {output_prefix}_{key}_{document|sentence}
  double seconds = 0;
};

PreprocessStats preprocess_jsonl(const PreprocessOptions& options);

// A small rule-based English sentence splitter (Megatron uses NLTK's punkt model instead, so
// sentence boundaries - and hence BERT samples - can differ from Megatron's on the same text).
// Returns the sentences as views into `text`, in order, each trimmed of surrounding whitespace
// (inner whitespace and newlines are kept), none empty. A sentence ends:
//  - at a blank line (a newline, optional spaces/tabs/CR, another newline): paragraphs and
//    headings are never joined;
//  - after a run of '.', '!' or '?' plus any closing quotes/brackets (" ' ) ] and the UTF-8
//    right quotes U+201D U+2019), when whitespace follows and then an ASCII uppercase letter,
//    a digit (verse numbers), or an opening quote/bracket (" ' ( [ U+201C U+2018);
//  - but not after a single '.' ending a common abbreviation (Mr Mrs Ms Messrs Dr St Jr Sr
//    Prof Rev Capt Col Gen Lt Sgt Mt Esq Hon vs viz cf, case-sensitive) or a single-letter
//    initial other than "I" ("J. Smith", "e.g."; not a letter after an apostrophe, "Paul's.").
std::vector<std::string_view> split_sentences(std::string_view text);

}  // namespace megatron::data
