#include "megatron/checkpoint/local_shard.h"

#include <cstring>
#include <limits>

#include "megatron/checkpoint/crc32c.h"
#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

constexpr int64_t kPrefix = 16;                     // magic + header length
constexpr uint64_t kMaxHeader = uint64_t{1} << 26;  // 64 MiB of JSON is never a real header

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

int64_t get_int(const nlohmann::json& j, const char* key, const std::string& where) {
  MT_INPUT_CHECK(j.contains(key) && j[key].is_number_integer(), where,
                 ": local checkpoint header: '", key, "' missing or not an integer");
  return j[key].get<int64_t>();
}

LocalShardTensor parse_tensor(const nlohmann::json& t, const std::string& where) {
  MT_INPUT_CHECK(t.is_object() && t.contains("name") && t["name"].is_string() &&
                     t.contains("dtype") && t["dtype"].is_string(),
                 where, ": local checkpoint header: a tensor entry lacks its name or dtype");
  LocalShardTensor out;
  out.name = t["name"].get<std::string>();
  try {
    out.dtype = parse_dtype(t["dtype"].get<std::string>());
  } catch (const Error&) {
    throw InputError(concat(where, ": local checkpoint tensor '", out.name, "': unknown dtype '",
                            t["dtype"].get<std::string>(), "'"));
  }
  out.numel = get_int(t, "numel", where);
  const int64_t crc = get_int(t, "crc32c", where);
  MT_INPUT_CHECK(out.numel >= 0 && out.numel <= (int64_t{1} << 48), where,
                 ": local checkpoint tensor '", out.name, "': element count ", out.numel,
                 " out of range");
  MT_INPUT_CHECK(crc >= 0 && crc <= std::numeric_limits<uint32_t>::max(), where,
                 ": local checkpoint tensor '", out.name, "': crc32c out of range");
  out.crc32c = static_cast<uint32_t>(crc);
  return out;
}

}  // namespace

int64_t LocalShardHeader::payload_bytes() const {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.nbytes();
  return n;
}

std::vector<uint8_t> encode_local_shard(LocalShardHeader header,
                                        const std::vector<std::span<const uint8_t>>& bytes) {
  MT_CHECK(bytes.size() == header.tensors.size(), "encode_local_shard: ", bytes.size(),
           " byte spans for ", header.tensors.size(), " tensors");
  nlohmann::json tensors = nlohmann::json::array();
  for (size_t i = 0; i < bytes.size(); ++i) {
    LocalShardTensor& t = header.tensors[i];
    const auto size = static_cast<int64_t>(dtype_size(t.dtype));
    MT_CHECK(static_cast<int64_t>(bytes[i].size()) % size == 0, "encode_local_shard: tensor '",
             t.name, "' has ", bytes[i].size(), " bytes, not whole ", dtype_name(t.dtype));
    t.numel = static_cast<int64_t>(bytes[i].size()) / size;
    t.crc32c = crc32c(0, bytes[i].data(), bytes[i].size());
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(dtype_name(t.dtype))},
                       {"numel", t.numel},
                       {"crc32c", t.crc32c}});
  }
  const std::string json =
      nlohmann::json{{"owner", header.owner},         {"world", header.world},
                     {"iteration", header.iteration}, {"fingerprint", header.fingerprint},
                     {"state", header.state},         {"tensors", tensors}}
          .dump();
  std::vector<uint8_t> out(kPrefix + json.size() + header.payload_bytes());
  std::memcpy(out.data(), kLocalShardMagic, 8);
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(uint64_t{json.size()} >> (8 * i));
  std::memcpy(out.data() + kPrefix, json.data(), json.size());
  uint8_t* p = out.data() + kPrefix + json.size();
  for (const auto& b : bytes) {
    if (!b.empty()) std::memcpy(p, b.data(), b.size());
    p += b.size();
  }
  return out;
}

int64_t local_shard_payload_offset(std::span<const uint8_t> prefix) {
  MT_INPUT_CHECK(prefix.size() >= kPrefix, "local checkpoint: shorter than its 16-byte prefix");
  return kPrefix + static_cast<int64_t>(read_u64_le(prefix.data() + 8));
}

LocalShardHeader parse_local_shard_header(std::span<const uint8_t> prefix, const std::string& where,
                                          int64_t file_size) {
  MT_INPUT_CHECK(prefix.size() >= kPrefix && std::memcmp(prefix.data(), kLocalShardMagic, 8) == 0,
                 where, ": not a local checkpoint shard (no MTLOCAL1 magic)");
  const uint64_t length = read_u64_le(prefix.data() + 8);
  MT_INPUT_CHECK(length <= kMaxHeader && length <= prefix.size() - kPrefix, where,
                 ": local checkpoint header of ", length, " bytes is truncated or too large (",
                 prefix.size(), " bytes read)");
  const auto* text = reinterpret_cast<const char*>(prefix.data() + kPrefix);
  const nlohmann::json j = nlohmann::json::parse(text, text + length, nullptr, false);
  MT_INPUT_CHECK(j.is_object(), where, ": local checkpoint header is not a JSON object");
  LocalShardHeader h;
  h.owner = get_int(j, "owner", where);
  h.world = get_int(j, "world", where);
  h.iteration = get_int(j, "iteration", where);
  MT_INPUT_CHECK(h.world >= 1 && h.owner >= 0 && h.owner < h.world && h.iteration >= 0, where,
                 ": local checkpoint header: owner ", h.owner, ", world ", h.world, ", iteration ",
                 h.iteration, " out of range");
  MT_INPUT_CHECK(j.contains("fingerprint") && j["fingerprint"].is_string(), where,
                 ": local checkpoint header: 'fingerprint' missing");
  h.fingerprint = j["fingerprint"].get<std::string>();
  if (j.contains("state")) h.state = j["state"];
  MT_INPUT_CHECK(h.state.is_object(), where, ": local checkpoint header: 'state' is not an object");
  MT_INPUT_CHECK(j.contains("tensors") && j["tensors"].is_array(), where,
                 ": local checkpoint header: 'tensors' missing");
  int64_t payload = 0;
  for (const auto& t : j["tensors"]) {
    h.tensors.push_back(parse_tensor(t, where));
    payload += h.tensors.back().nbytes();
    MT_INPUT_CHECK(payload <= (int64_t{1} << 50), where, ": local checkpoint payload too large");
  }
  const int64_t expected = kPrefix + static_cast<int64_t>(length) + payload;
  MT_INPUT_CHECK(file_size < 0 || file_size == expected, where, ": local checkpoint is ", file_size,
                 " bytes, its header describes ", expected, " (truncated or overwritten)");
  return h;
}

LocalShardHeader parse_local_shard(std::span<const uint8_t> file, const std::string& where,
                                   std::vector<std::span<const uint8_t>>* payload) {
  LocalShardHeader h = parse_local_shard_header(file, where, static_cast<int64_t>(file.size()));
  int64_t at = local_shard_payload_offset(file);
  if (payload) payload->clear();
  for (const auto& t : h.tensors) {
    const std::span<const uint8_t> bytes = file.subspan(at, t.nbytes());
    MT_INPUT_CHECK(crc32c(0, bytes.data(), bytes.size()) == t.crc32c, where,
                   ": local checkpoint tensor '", t.name, "' fails its CRC-32C (corrupted)");
    if (payload) payload->push_back(bytes);
    at += t.nbytes();
  }
  return h;
}

}  // namespace megatron::checkpoint
