// Hugging Face tokenizer.json (data/tokenizer_hf.h): the input is the file; whatever loads
// encodes and decodes a sample text with added-token, digit, contraction and whitespace runs,
// case changes, '/' after punctuation, characters the normalizers change, a literal U+2581 and a
// character SentencePiece-style vocabularies lack (byte fallback or <unk>), a combining mark and
// a double space.
#include "data/tokenizer_hf.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::string path = fuzz::write_file("tokenizer.json", data, size);
  return fuzz::refuse_or_accept([&] {
    const auto tok = data::make_huggingface_tokenizer(path);
    const auto ids = tok->encode(
        "Hello, WORLD'S camelCase 1234567 \xc3\xa9t\xc3\xa9 \xef\xac\x81 ./\r\n/ "
        "\r\n\n  <|end_of_text|>x [MASK] \xff end \xe2\x96\x81meta <start_of_turn>\xe2\x98\x83 "
        "e\xcc\x81 a  b");
    (void)tok->decode(ids);
  });
}
