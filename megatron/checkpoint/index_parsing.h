#pragma once
// Reading a checkpoint's tensor index (metadata.json's "tensors"), shared by the save's final
// check (finalize) and the loader: every field checked, a malformed one an InputError naming
// the file and the field; and opening the shard files against it.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/safetensors.h"

namespace megatron::checkpoint::detail {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

inline std::vector<int64_t> dims(const Shape& s) { return {s.begin(), s.end()}; }

inline std::string shape_str(const std::vector<int64_t>& s) { return json(s).dump(); }

inline std::string dump(const ordered_json& j, int indent = -1) {
  return j.dump(indent, ' ', false, ordered_json::error_handler_t::replace);
}

// metadata.json: the caller's metadata indented, then one line per file and per piece (readable,
// diffable, and compact for models with thousands of pieces).

struct IndexError {
  std::string where;  // prefix naming the file
  template <typename... Parts>
  InputError operator()(const Parts&... parts) const {
    return InputError(concat(where, ": ", parts...));
  }
};

int64_t get_int(const json& j, const char* key, const std::string& what, const IndexError& fail);
std::vector<int64_t> get_ints(const json& j, const char* key, const std::string& what,
                              const IndexError& fail);
const std::string& get_string(const json& j, const char* key, const std::string& what,
                              const IndexError& fail);
SavedPiece parse_piece(const json& p, const std::vector<int64_t>& shape, size_t element_size,
                       const std::string& what, const IndexError& fail);
bool safe_file_name(const std::string& f);
void parse_tensor_index(const json& j, CheckpointIndex& index, const IndexError& fail);
std::map<std::string, safetensors::File> open_files(const CheckpointIndex& index,
                                                    const std::set<std::string>& names);
std::string describe(const TensorPiece& p, const PieceGeometry& g);

}  // namespace megatron::checkpoint::detail
