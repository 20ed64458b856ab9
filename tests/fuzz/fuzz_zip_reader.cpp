// torch.save archives: the zip reader (megatron/checkpoint/zip_reader.h) reads the directory and
// every entry whole (CRC-32 checked); then torch_file.h opens it (data.pkl through the
// restricted unpickler) and decodes every tensor found in the top two levels of the pickle.
#include "megatron/checkpoint/pickle.h"
#include "megatron/checkpoint/torch_file.h"
#include "megatron/checkpoint/zip_reader.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
void decode_tensors(megatron::checkpoint::TorchFile& f, const megatron::checkpoint::PickleValue& v,
                    int depth) {
  using megatron::checkpoint::TorchFile;
  for (const auto& [k, x] : v.dict) {
    if (TorchFile::is_tensor(*x))
      (void)f.tensor(*x, "fuzz");
    else if (depth < 2)
      decode_tensors(f, *x, depth + 1);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::string path = fuzz::write_file("archive.pt", data, size);
  fuzz::refuse_or_accept([&] {
    checkpoint::ZipArchive z(path);
    for (const auto& e : z.entries()) (void)z.read(e);
  });
  return fuzz::refuse_or_accept([&] {
    checkpoint::TorchFile f(path);
    decode_tensors(f, f.root(), 0);
  });
}
