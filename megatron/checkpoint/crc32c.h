#pragma once
// CRC-32C (Castagnoli, the iSCSI / ext4 / safetensors-tools checksum) of checkpoint shard files:
// recorded per file in metadata.json at save, verified before a load reads a file.
#include <cstddef>
#include <cstdint>
#include <string>

namespace megatron::checkpoint {

// Continues `crc` (0 to start) over n bytes. The SSE4.2 crc32 instruction where the CPU has it
// (checked at run time), else slicing-by-8 tables; both give the same value.
uint32_t crc32c(uint32_t crc, const void* data, size_t n);
// The same without the hardware path (tests compare the two).
uint32_t crc32c_portable(uint32_t crc, const void* data, size_t n);
// Of a whole file; Error naming the path when it cannot be read.
uint32_t crc32c_of_file(const std::string& path);

}  // namespace megatron::checkpoint
