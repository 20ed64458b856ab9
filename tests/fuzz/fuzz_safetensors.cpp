// safetensors files (megatron/checkpoint/safetensors.h): the header is parsed in memory and the
// whole file opened from disk (header length, JSON, offsets against the data size).
#include "megatron/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  fuzz::refuse_or_accept([&] {
    (void)checkpoint::safetensors::parse_header(
        std::string_view(reinterpret_cast<const char*>(data), size), size / 2, "fuzz");
  });
  const std::string path = fuzz::write_file("f.safetensors", data, size);
  return fuzz::refuse_or_accept([&] {
    checkpoint::safetensors::File f(path);
    for (const auto& t : f.tensors()) (void)t;
  });
}
