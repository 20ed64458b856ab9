#pragma once
// Tokenizers: text <-> token ids. Built from a TokenizerSpec whose `type` is one of Megatron's
// --tokenizer-type names (config::TokenizerType).
//
//   SentencePieceTokenizer  a SentencePiece .model file (`model`). eod() is the piece
//                           "<|endoftext|>" when the model has it (as the shipped
//                           tokenizers/corpus_spm_8k.model does), else the model's </s>.
//   ByteTokenizer           no files: ids 0..255 are the UTF-8 bytes, 256 is EOD (vocab 257).
//   GPT2BPETokenizer        GPT-2's byte-level BPE from `vocab_file` (vocab.json) and
//                           `merge_file` (merges.txt); ids identical to OpenAI's encoder.py /
//                           Megatron's GPT2Tokenizer. eod() = "<|endoftext|>".
//   BertWordPieceLowerCase, BertWordPieceCase
//                           BERT's BasicTokenizer + WordPiece from `vocab_file` (vocab.txt);
//                           ids identical to Megatron's bert_tokenization.FullTokenizer.
//                           eod() = [SEP].
// data/README.md ("Tokenizers") documents every choice and deviation.
//
// encode/decode are const and safe to call from several threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/config/options.h"

namespace megatron::config {
struct Recipe;
}

namespace megatron::data {

class Tokenizer {
 public:
  virtual ~Tokenizer();
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Throws InputError for an id outside [0, vocab_size()).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The end-of-document token appended by preprocess_data --append-eod.
  virtual int32_t eod() const = 0;
  // -1 when the tokenizer has no such token.
  virtual int32_t pad() const;
  virtual int32_t bos() const;
  // The token that encoding with special tokens puts in front (transformers' `tok(text)`), -1
  // when none; bos() stays the tokenizer's BOS token (chat templates write it themselves).
  virtual int32_t prompt_bos() const;
  virtual int32_t eos() const;
  // BERT's special tokens; -1 when the tokenizer has no such token.
  virtual int32_t cls() const;
  virtual int32_t sep() const;
  virtual int32_t mask() const;
  virtual int32_t unk() const;
  // A short description for logs, e.g. "SentencePieceTokenizer(tokenizers/x.model, vocab 8192)".
  virtual std::string describe() const;
};

struct TokenizerSpec {
  // HuggingFaceTokenizer's `model` is an HF directory (data/tokenizer_hf.h); NullTokenizer
  // builds no tokenizer (make_tokenizer refuses it).
  config::TokenizerType type = config::TokenizerType::Byte;
  std::string vocab_file, merge_file, model;
};

// Throws InputError naming the file (missing, unreadable, malformed; with the line where there
// is one), or for NullTokenizer, which has no text to read.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);

// A recipe's data.tokenizer, its file names resolved against the recipe (config::resolve_path).
// InputError when the type is unset (a recipe built in code that skipped validate()).
TokenizerSpec tokenizer_spec(const config::Recipe& recipe);

// A --tokenizer-type value of the tools: its type, else InputError listing the names.
config::TokenizerType parse_tokenizer_type(const std::string& name);

// The byte-level tokenizer, also usable directly in tests.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEod = 256;
  std::vector<int32_t> encode(std::string_view text) const override;
  // EOD decodes to "<|endoftext|>".
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return 257; }
  int32_t eod() const override { return kEod; }
  std::string describe() const override { return "ByteTokenizer(vocab 257)"; }
};

// GPT-2's byte-level BPE (OpenAI encoder.py / Megatron GPT2Tokenizer behaviour, byte for byte).
// encode: ill-formed UTF-8 is first replaced like Python's decode(errors="replace"); the text
// "<|endoftext|>" is NOT special (it encodes as ordinary text, as in the reference).
// decode: the tokens' bytes, ill-formed UTF-8 replaced by U+FFFD (the reference's
// errors="replace"). BPE results are cached per pre-token in a sharded, locked cache.
class GPT2BPETokenizer final : public Tokenizer {
 public:
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~GPT2BPETokenizer() override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  int32_t eos() const override { return eod(); }
  std::string describe() const override;
  // GPT-2's pre-tokenization (the regex of encoder.py, by hand) of valid UTF-8 text.
  static std::vector<std::string_view> pretokenize(std::string_view text);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// BERT WordPiece (Megatron's bert_tokenization.FullTokenizer): clean text, split CJK ideographs,
// whitespace split, lower-case + strip accents (NFD, drop Mn) when lower_case, split
// punctuation, then greedy longest-match-first WordPiece ("##" continuations; a word longer than
// 200 code points, Megatron's limit, is [UNK]). encode adds no [CLS]/[SEP]. eod() = sep().
// decode: Megatron's convert_tokens_to_string (join with spaces, drop " ##", clean up spaces
// before . ? ! , and contractions).
class BertWordPieceTokenizer final : public Tokenizer {
 public:
  BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case);
  ~BertWordPieceTokenizer() override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override { return sep(); }
  int32_t pad() const override;
  int32_t cls() const override;
  int32_t sep() const override;
  int32_t mask() const override;
  int32_t unk() const override;
  std::string describe() const override;
  // The wordpieces of `text` (what encode maps to ids).
  std::vector<std::string> tokenize(std::string_view text) const;
  // The vocabulary entry of an id (InputError when out of range).
  const std::string& id_to_token(int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The name of the EOD piece that train_tokenizer puts into SentencePiece models.
inline constexpr std::string_view kEodPiece = "<|endoftext|>";

}  // namespace megatron::data
