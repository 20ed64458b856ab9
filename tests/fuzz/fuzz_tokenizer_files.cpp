// Tokenizer files (data/tokenizer.h): the input is split at the first 0xFF byte into a GPT-2
// vocab.json and merges.txt; the whole input is also a WordPiece vocab.txt (cased and lower
// case) and a SentencePiece model. Whatever loads encodes and decodes a sample text.
#include "data/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

void exercise(const megatron::data::Tokenizer& tok) {
  const auto ids = tok.encode("Hello, world! 12 \xc3\xa9t\xc3\xa9 <|endoftext|> [CLS] x");
  (void)tok.decode(ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const auto* bytes = reinterpret_cast<const char*>(data);
  const std::string_view all(bytes, size);
  const size_t cut = all.find('\xff');
  const std::string_view vocab = all.substr(0, cut);
  const std::string_view merges = cut == std::string_view::npos ? "" : all.substr(cut + 1);
  const std::string v = fuzz::write_file("vocab.json", vocab.data(), vocab.size());
  const std::string m = fuzz::write_file("merges.txt", merges.data(), merges.size());
  fuzz::refuse_or_accept([&] {
    exercise(*data::make_tokenizer({config::TokenizerType::GPT2BPE, v, m, ""}));
  });
  const std::string w = fuzz::write_file("vocab.txt", data, size);
  fuzz::refuse_or_accept([&] {
    exercise(*data::make_tokenizer({config::TokenizerType::BertWordPieceLowerCase, w, "", ""}));
  });
  fuzz::refuse_or_accept([&] {
    exercise(*data::make_tokenizer({config::TokenizerType::BertWordPieceCase, w, "", ""}));
  });
  const std::string sp = fuzz::write_file("t.model", data, size);
  return fuzz::refuse_or_accept([&] {
    exercise(*data::make_tokenizer({config::TokenizerType::SentencePiece, "", "", sp}));
  });
}
