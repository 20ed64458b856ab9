// Megatron .idx files (data/indexed_dataset.h) with a .bin of 4 KiB: open (which validates the
// whole index) and read every sequence.
#include "data/indexed_dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  static const std::string bin = [] {
    std::string b(4096, '\0');
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>(i * 7);
    return fuzz::write_file("d.bin", b.data(), b.size());
  }();
  (void)bin;
  fuzz::write_file("d.idx", data, size);
  return fuzz::refuse_or_accept([] {
    data::IndexedDataset ds((fuzz::scratch() / "d").string());
    for (int64_t i = 0; i < ds.num_sequences() && i < 4096; ++i) (void)ds.read(i);
  });
}
