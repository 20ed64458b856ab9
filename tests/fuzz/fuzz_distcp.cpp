// Distributed checkpoints (megatron/checkpoint/distcp.h): the input is a little-endian u32
// length L, then L bytes of `.metadata` (a pickle, through the restricted unpickler), then the
// bytes of the data file `__0_0.distcp`. Every tensor of at most 2^20 elements is read whole
// (its chunks' archives opened at the offsets the metadata gives, their tensors checked against
// the chunk boxes).
#include <cstring>
#include <filesystem>

#include "megatron/checkpoint/distcp.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  if (size < 4) return 0;
  uint32_t meta = 0;
  std::memcpy(&meta, data, 4);
  meta = static_cast<uint32_t>(std::min<size_t>(meta, size - 4));
  const auto dir = fuzz::scratch() / "dcp";
  std::filesystem::create_directories(dir);
  fuzz::write_file("dcp/.metadata", data + 4, meta);
  fuzz::write_file("dcp/__0_0.distcp", data + 4 + meta, size - 4 - meta);
  return fuzz::refuse_or_accept([&] {
    checkpoint::DcpCheckpoint c(dir.string());
    for (const auto& [name, t] : c.tensors()) {
      int64_t n = 1;
      for (int64_t d : t.shape) n = d > (int64_t{1} << 20) ? int64_t{1} << 21 : n * d;
      if (n <= (int64_t{1} << 20)) (void)c.read(name);
    }
  });
}
