// SFT conversations (data/sft_dataset.h): JSONL lines in either form, the chat templates and
// their loss flags, then the dataset over them with every packing and truncation mode (which
// drop conversations without a trained token and refuse a split left empty) and every sample.
#include "data/sft_dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::string in = fuzz::write_file("in.jsonl", data, size);
  return fuzz::refuse_or_accept([&] {
    static const data::ByteTokenizer tokenizer;
    const auto tmpl = static_cast<data::ChatTemplate>(size % 5);
    const auto conversations = data::SFTConversations::load(in, tokenizer, tmpl);
    data::SFTDatasetConfig cfg;
    cfg.seq_length = 8 + static_cast<int64_t>(size % 57);
    cfg.packing = size % 2 == 0 ? data::SFTPacking::Packed : data::SFTPacking::Padded;
    cfg.truncation = static_cast<data::SFTTruncation>(size % 3);
    cfg.num_samples = static_cast<int64_t>(size % 7);
    cfg.log = [](const std::string&) {};
    const auto ds = data::SFTDataset::build(conversations, 0, "1", cfg);
    for (int64_t i = 0; i < ds->num_samples(); ++i) (void)ds->get_sample(i);
  });
}
