// preprocess_data: JSONL -> Megatron indexed dataset ({prefix}_{key}_document.bin/.idx).
// Flags follow Megatron's tools/preprocess_data.py. Exit codes: 0 ok, 1 bad input, 2 usage.
#include <iostream>

#include "data/cli.h"
#include "data/preprocess.h"
#include "megatron/core/error.h"

namespace {

constexpr int kMaxWorkers = 1024;

constexpr const char* kUsage =
    R"(usage: preprocess_data --input FILE.jsonl [FILE.jsonl ...] --output-prefix PREFIX
                       --tokenizer-type {SentencePieceTokenizer,GPT2BPETokenizer,
                                         BertWordPieceLowerCase,BertWordPieceCase,ByteTokenizer,
                                         HuggingFaceTokenizer}
                       [--tokenizer-model FILE] [--vocab-file FILE] [--merge-file FILE]
                       [--json-keys KEY [KEY ...]] [--append-eod] [--split-sentences] [--workers N]
                       [--skip-bad-lines] [--log-interval N]

Tokenizes every JSON line's KEY string (default: text) as one document and writes
PREFIX_KEY_document.bin/.idx (PREFIX_KEY_sentence.bin/.idx with --split-sentences; uint16 tokens
when the vocabulary is below 65500, else int32).
  --input            JSONL input file(s), one JSON object per line
  --output-prefix    output path prefix
  --tokenizer-type   SentencePieceTokenizer (--tokenizer-model), GPT2BPETokenizer
                     (--vocab-file vocab.json --merge-file merges.txt), BertWordPieceLowerCase
                     or BertWordPieceCase (--vocab-file vocab.txt; EOD is [SEP]),
                     ByteTokenizer (no files), or HuggingFaceTokenizer (--tokenizer-model a
                     Hugging Face model directory: its tokenizer.json or tokenizer.model)
  --tokenizer-model  SentencePiece .model file, or the HuggingFaceTokenizer directory
  --vocab-file       GPT-2 vocab.json / BERT vocab.txt
  --merge-file       GPT-2 merges.txt
  --json-keys        keys to tokenize (one output per key; default: text)
  --append-eod       end every non-empty document with the tokenizer's EOD id
  --split-sentences  one sequence per sentence (a rule-based splitter; Megatron uses NLTK punkt,
                     so boundaries can differ), the document's sentences form one document;
                     writes PREFIX_KEY_sentence.bin/.idx (the input of BERT datasets)
  --workers          tokenizer threads (default 1); output order is the input order
  --skip-bad-lines   skip (and count) lines that are not valid JSON or lack a key, instead of
                     failing with the file and line number
  --log-interval     documents between progress lines on stderr (default 1000; 0: none)
)";

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  return megatron::data::cli::run_tool("preprocess_data", kUsage, [&]() -> int {
    const megatron::data::cli::Args args(argc, argv,
                                         {{"input", Arity::Many},
                                          {"output-prefix", Arity::One},
                                          {"tokenizer-type", Arity::One},
                                          {"tokenizer-model", Arity::One},
                                          {"vocab-file", Arity::One},
                                          {"merge-file", Arity::One},
                                          {"json-keys", Arity::Many},
                                          {"append-eod", Arity::Flag},
                                          {"split-sentences", Arity::Flag},
                                          {"workers", Arity::One},
                                          {"skip-bad-lines", Arity::Flag},
                                          {"log-interval", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    megatron::data::PreprocessOptions opt;
    if (!args.has("input"))
      throw megatron::data::cli::UsageError("missing required flag '--input'");
    opt.inputs = args.values("input");
    opt.output_prefix = args.required("output-prefix");
    opt.tokenizer.type = megatron::data::parse_tokenizer_type(args.required("tokenizer-type"));
    opt.tokenizer.model = args.get("tokenizer-model");
    opt.tokenizer.vocab_file = args.get("vocab-file");
    opt.tokenizer.merge_file = args.get("merge-file");
    if (args.has("json-keys")) opt.json_keys = args.values("json-keys");
    opt.append_eod = args.has("append-eod");
    opt.split_sentences = args.has("split-sentences");
    opt.workers = static_cast<int>(args.get_int("workers", 1, 1));
    // Threads beyond a few per core only cost memory; tens of thousands fail to start.
    MT_INPUT_CHECK(opt.workers <= kMaxWorkers, "--workers: at most ", kMaxWorkers,
                   " tokenizer threads (got ", opt.workers, ")");
    opt.skip_bad_lines = args.has("skip-bad-lines");
    opt.log_interval = args.get_int("log-interval", 1000, 0);
    opt.log = &std::cerr;
    const auto stats = megatron::data::preprocess_jsonl(opt);
    if (stats.bad_lines > 0)
      std::cerr << "preprocess_data: warning: skipped " << stats.bad_lines << " bad line(s)\n";
    return 0;
  });
}
