#pragma once
// Tokenizers: text <-> token ids. Built from a TokenizerSpec whose `type` uses Megatron's
// --tokenizer-type names.
//
//   SentencePieceTokenizer  a SentencePiece .model file (`model`). eod() is the piece
//                           "<|endoftext|>" when the model has it (as the shipped
//                           tokenizers/corpus_spm_8k.model does), else the model's </s>.
//   ByteTokenizer           no files: ids 0..255 are the UTF-8 bytes, 256 is EOD (vocab 257).
//   GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase: recognised, not yet
//                           implemented (InputError naming the type).
//
// encode/decode are const and safe to call from several threads at once.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

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
  virtual int32_t eos() const;
  // A short description for logs, e.g. "SentencePieceTokenizer(tokenizers/x.model, vocab 8192)".
  virtual std::string describe() const;
};

struct TokenizerSpec {
  std::string type;  // SentencePieceTokenizer | ByteTokenizer (| GPT2BPETokenizer | BertWordPiece*)
  std::string vocab_file, merge_file, model;
};

// Throws InputError naming the type (unknown / not implemented yet) or the file (missing,
// unreadable, not a valid model).
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerSpec& spec);

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

// The name of the EOD piece that train_tokenizer puts into SentencePiece models.
inline constexpr std::string_view kEodPiece = "<|endoftext|>";

}  // namespace megatron::data
