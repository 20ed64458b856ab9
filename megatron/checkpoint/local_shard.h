#pragma once
// One rank's local checkpoint (checkpoint.local_interval): the raw bytes of its parameter and
// optimizer buffers, in the layout it trains in, with the run state a resume needs. Restored
// only into the same layout (the fingerprint), so it is exact to the bit.
//
// File: "MTLOCAL1", the header's length (uint64, little-endian), the header (JSON: owner rank,
// world size, iteration, layout fingerprint, run state, and per tensor its name, dtype, element
// count and CRC-32C), then each tensor's bytes in header order. Nothing else: the whole size is
// known from the header, and a parser refuses anything that does not add up.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "megatron/core/dtype.h"

namespace megatron::checkpoint {

struct LocalShardTensor {
  std::string name;
  DType dtype = DType::F32;
  int64_t numel = 0;
  uint32_t crc32c = 0;  // of its bytes
  int64_t nbytes() const { return numel * static_cast<int64_t>(dtype_size(dtype)); }
};

struct LocalShardHeader {
  int64_t owner = 0, world = 1, iteration = 0;
  std::string fingerprint;                          // the layout it can be restored into
  nlohmann::json state = nlohmann::json::object();  // consumed samples, optimizer steps, ...
  std::vector<LocalShardTensor> tensors;
  int64_t payload_bytes() const;
};

inline constexpr char kLocalShardMagic[8] = {'M', 'T', 'L', 'O', 'C', 'A', 'L', '1'};

// header.tensors give names and dtypes; their element counts and CRCs are taken from `bytes`
// (one span per tensor, in order).
std::vector<uint8_t> encode_local_shard(LocalShardHeader header,
                                        const std::vector<std::span<const uint8_t>>& bytes);

// The header of a file's first bytes (at least the magic, length and header). InputError naming
// `where` for anything malformed. When `file_size` >= 0 it must be the size the header implies.
LocalShardHeader parse_local_shard_header(std::span<const uint8_t> prefix, const std::string& where,
                                          int64_t file_size = -1);
// The whole file: header checked as above, every tensor's CRC verified; returns the header,
// and each tensor's bytes (pointing into `file`) in `payload`.
LocalShardHeader parse_local_shard(std::span<const uint8_t> file, const std::string& where,
                                   std::vector<std::span<const uint8_t>>* payload);
// Bytes before the payload (magic, length, header) of an encoded shard.
int64_t local_shard_payload_offset(std::span<const uint8_t> prefix);

}  // namespace megatron::checkpoint
