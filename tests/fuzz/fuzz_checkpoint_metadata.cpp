// A checkpoint's metadata.json (megatron/checkpoint): read_index parses the files (sizes,
// checksums) and the tensor index (shapes, pieces, geometry, byte ranges), then verify_files
// checks them against an (empty) shard.
#include "megatron/checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace megatron;
  static const std::string dir = [] {
    const auto d = fuzz::scratch() / "ckpt" / "iter_0000001";
    std::filesystem::create_directories(d);
    std::ofstream(d / "shard_0.safetensors") << "";
    return d.string();
  }();
  fuzz::write_file("ckpt/iter_0000001/metadata.json", data, size);
  return fuzz::refuse_or_accept([] {
    const checkpoint::CheckpointIndex index = checkpoint::read_index(dir);
    checkpoint::verify_files(index);
  });
}
