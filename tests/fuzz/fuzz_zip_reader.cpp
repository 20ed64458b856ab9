// The zip reader of torch.save archives (megatron/checkpoint/zip_reader.h): the directory, every
// entry read whole (CRC-32 checked) and, for data.pkl, unpickled by the restricted unpickler.
#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/zip_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::string path = fuzz::write_file("archive.pt", data, size);
  return fuzz::refuse_or_accept([&] {
    checkpoint::ZipArchive z(path);
    for (const auto& e : z.entries()) {
      const std::vector<uint8_t> bytes = z.read(e);
      if (e.name.size() >= 8 && e.name.ends_with("data.pkl"))
        (void)checkpoint::read_pickle(bytes, e.name);
    }
  });
}
