// A local checkpoint shard (megatron/checkpoint/local_shard.h, checkpoint.local_interval): the
// header alone as a restart's scan reads it (with the file's size), then the whole file with
// every tensor's CRC-32C, as a restore reads it.
#include <span>

#include "megatron/checkpoint/local_shard.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  const std::span<const uint8_t> file(data, size);
  fuzz::refuse_or_accept([&] {
    (void)checkpoint::parse_local_shard_header(file, "fuzz.mtl", static_cast<int64_t>(size));
  });
  return fuzz::refuse_or_accept([&] {
    std::vector<std::span<const uint8_t>> payload;
    const auto h = checkpoint::parse_local_shard(file, "fuzz.mtl", &payload);
    if (payload.size() != h.tensors.size()) __builtin_trap();
  });
}
