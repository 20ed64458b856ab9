// JSONL input of preprocess_data (data/preprocess.h): lines, JSON objects, the text key, byte
// tokenization, sentence splitting, the .bin/.idx writer.
#include "data/preprocess.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::string in = fuzz::write_file("in.jsonl", data, size);
  return fuzz::refuse_or_accept([&] {
    data::PreprocessOptions opt;
    opt.inputs = {in};
    opt.json_keys = {"text"};
    opt.output_prefix = (fuzz::scratch() / "out").string();
    opt.tokenizer = {config::TokenizerType::Byte, "", "", ""};
    opt.split_sentences = size % 2 == 1;
    opt.append_eod = true;
    opt.log_interval = 0;
    (void)data::preprocess_jsonl(opt);
  });
}
