// train_tokenizer: train a SentencePiece model on JSONL documents, deterministically.
//
// Every non-empty line of every document's text is one training sentence (SentencePiece
// skips sentences longer than --max-sentence-length, and newlines are not pieces: they
// encode through byte fallback). Fixed settings, chosen for an LLM tokenizer that round-trips
// any UTF-8 exactly: byte_fallback, identity normalization, whitespace kept as is, no dummy
// prefix, whitespace-only pieces allowed, ids unk 0 / <s> 1 / </s> 2 / <pad> 3, then the EOD
// piece (user-defined, default "<|endoftext|>") at id 4. Determinism: all sentences are used
// (input_sentence_size 0) in input order (no shuffle) and the random seed is fixed (--seed).
// Exit codes: 0 ok, 1 bad input / training failure, 2 usage.
#include <sentencepiece_trainer.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "data/cli.h"
#include "data/tokenizer.h"
#include "megatron/core/error.h"

namespace {

constexpr const char* kUsage =
    R"(usage: train_tokenizer --input FILE.jsonl [FILE.jsonl ...] --model-prefix PREFIX
                       --vocab-size N [--model-type {bpe,unigram,char,word}]
                       [--json-keys KEY [KEY ...]] [--character-coverage F]
                       [--eod-piece STR] [--max-sentence-length N] [--num-threads N]
                       [--seed N]

Trains a SentencePiece model on the KEY strings (default: text) of the JSONL documents and
writes PREFIX.model and PREFIX.vocab. Defaults: --model-type bpe, --character-coverage 1.0,
--eod-piece "<|endoftext|>", --max-sentence-length 16384, --num-threads 1, --seed 1234.
)";

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

std::vector<std::string> load_sentences(const std::vector<std::string>& inputs,
                                        const std::vector<std::string>& keys, int64_t& docs) {
  std::vector<std::string> sentences;
  for (const auto& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    MT_INPUT_CHECK(in.is_open(), "cannot open input file '", path, "'");
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range (1e999)
        throw megatron::InputError(
            megatron::concat(path, ":", line_no, ": invalid JSON: ", e.what()));
      }
      MT_INPUT_CHECK(j.is_object(), path, ":", line_no, ": expected a JSON object, got ",
                     j.type_name());
      for (const auto& key : keys) {
        const auto it = j.find(key);
        MT_INPUT_CHECK(it != j.end(), path, ":", line_no, ": key '", key, "' is missing");
        MT_INPUT_CHECK(it->is_string(), path, ":", line_no, ": key '", key,
                       "' is not a string (got ", it->type_name(), ")");
        const std::string& text = it->get_ref<const std::string&>();
        size_t pos = 0;
        while (pos <= text.size()) {
          size_t nl = text.find('\n', pos);
          if (nl == std::string::npos) nl = text.size();
          if (nl > pos) sentences.emplace_back(text.substr(pos, nl - pos));
          pos = nl + 1;
        }
      }
      ++docs;
    }
    MT_INPUT_CHECK(!in.bad(), "read error on input file '", path, "'");
  }
  return sentences;
}

}  // namespace

int main(int argc, char** argv) {
  using megatron::data::cli::Arity;
  return megatron::data::cli::run_tool("train_tokenizer", kUsage, [&]() -> int {
    const megatron::data::cli::Args args(argc, argv,
                                         {{"input", Arity::Many},
                                          {"model-prefix", Arity::One},
                                          {"vocab-size", Arity::One},
                                          {"model-type", Arity::One},
                                          {"json-keys", Arity::Many},
                                          {"character-coverage", Arity::One},
                                          {"eod-piece", Arity::One},
                                          {"max-sentence-length", Arity::One},
                                          {"num-threads", Arity::One},
                                          {"seed", Arity::One}});
    if (args.help()) {
      std::cout << kUsage;
      return 0;
    }
    if (!args.has("input"))
      throw megatron::data::cli::UsageError("missing required flag '--input'");
    const auto& inputs = args.values("input");
    const std::string prefix = args.required("model-prefix");
    const int64_t vocab = args.get_int("vocab-size", 0, 1);
    if (!args.has("vocab-size"))
      throw megatron::data::cli::UsageError("missing required flag '--vocab-size'");
    const std::string type = args.get("model-type", "bpe");
    if (type != "bpe" && type != "unigram" && type != "char" && type != "word")
      throw megatron::data::cli::UsageError(
          "--model-type must be bpe, unigram, char or word, got '" + type + "'");
    const std::vector<std::string> keys =
        args.has("json-keys") ? args.values("json-keys") : std::vector<std::string>{"text"};
    const double coverage = args.get_double("character-coverage", 1.0);
    const std::string eod = args.get("eod-piece", std::string(megatron::data::kEodPiece));
    const int64_t max_len = args.get_int("max-sentence-length", 16384, 1);
    const int64_t threads = args.get_int("num-threads", 1, 1);
    const int64_t seed = args.get_int("seed", 1234, 0);

    const auto dir = std::filesystem::path(prefix).parent_path();
    MT_INPUT_CHECK(dir.empty() || std::filesystem::is_directory(dir), "output directory '",
                   dir.string(), "' (of --model-prefix ", prefix, ") does not exist");

    const auto t0 = std::chrono::steady_clock::now();
    int64_t docs = 0;
    const std::vector<std::string> sentences = load_sentences(inputs, keys, docs);
    MT_INPUT_CHECK(!sentences.empty(), "train_tokenizer: the input files hold no text");
    std::cerr << "train_tokenizer: " << docs << " documents, " << sentences.size()
              << " sentences (lines)\n";

    const std::unordered_map<std::string, std::string> kwargs = {
        {"model_prefix", prefix},
        {"vocab_size", std::to_string(vocab)},
        {"model_type", type},
        {"character_coverage", std::to_string(coverage)},
        {"byte_fallback", "true"},
        {"normalization_rule_name", "identity"},
        {"remove_extra_whitespaces", "false"},
        {"add_dummy_prefix", "false"},
        {"allow_whitespace_only_pieces", "true"},
        {"user_defined_symbols", eod},
        {"unk_id", "0"},
        {"bos_id", "1"},
        {"eos_id", "2"},
        {"pad_id", "3"},
        {"input_sentence_size", "0"},
        {"shuffle_input_sentence", "false"},
        {"max_sentence_length", std::to_string(max_len)},
        {"num_threads", std::to_string(threads)},
    };
    sentencepiece::SetRandomGeneratorSeed(static_cast<unsigned int>(seed));
    VectorIterator it(sentences);
    const auto status = sentencepiece::SentencePieceTrainer::Train(kwargs, &it);
    MT_INPUT_CHECK(status.ok(), "SentencePiece training failed: ", status.ToString());

    // Check the result loads and has the EOD piece.
    const auto tok = megatron::data::make_tokenizer(
        {megatron::config::TokenizerType::SentencePiece, "", "", prefix + ".model"});
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cerr << "train_tokenizer: wrote " << prefix << ".model and " << prefix << ".vocab ("
              << tok->describe() << ") in " << secs << " s\n";
    return 0;
  });
}
