#include "megatron/checkpoint/index_parsing.h"

#include <filesystem>

#include "megatron/checkpoint/crc32c.h"
#include "megatron/checkpoint/file_io.h"

namespace megatron::checkpoint::detail {

namespace fs = std::filesystem;

int64_t get_int(const json& j, const char* key, const std::string& what, const IndexError& fail) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    throw fail(what, ": missing or non-integer \"", key, "\"");
  return it->get<int64_t>();
}

std::vector<int64_t> get_ints(const json& j, const char* key, const std::string& what,
                              const IndexError& fail) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) throw fail(what, ": missing or non-array \"", key, "\"");
  std::vector<int64_t> out;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      throw fail(what, ": \"", key, "\" ", it->dump(),
                 " holds a value that is not a non-negative integer");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

const std::string& get_string(const json& j, const char* key, const std::string& what,
                              const IndexError& fail) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) throw fail(what, ": missing or non-string \"", key, "\"");
  return it->get_ref<const std::string&>();
}

SavedPiece parse_piece(const json& p, const std::vector<int64_t>& shape, size_t element_size,
                       const std::string& what, const IndexError& fail) {
  if (!p.is_object()) throw fail(what, " is not an object");
  SavedPiece s;
  s.file = get_string(p, "file", what, fail);
  s.key = get_string(p, "key", what, fail);
  s.geometry.shape = shape;
  s.geometry.offset = get_ints(p, "offset", what, fail);
  s.geometry.extent = get_ints(p, "extent", what, fail);
  const auto flat = get_ints(p, "flat", what, fail);
  const auto data = get_ints(p, "data_offsets", what, fail);
  if (flat.size() != 2) throw fail(what, ": \"flat\" must be [begin, end]");
  if (data.size() != 2) throw fail(what, ": \"data_offsets\" must be [begin, end]");
  s.geometry.flat_begin = flat[0];
  s.geometry.flat_end = flat[1];
  if (auto problem = s.geometry.problem()) throw fail(what, ": ", *problem);
  s.data_begin = static_cast<uint64_t>(data[0]);
  s.data_end = static_cast<uint64_t>(data[1]);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(s.geometry.count()), element_size, &bytes) ||
      s.data_begin > s.data_end || s.data_end - s.data_begin != bytes)
    throw fail(what, ": data_offsets ", json(data).dump(), " do not hold ", s.geometry.count(),
               " elements of ", element_size, " bytes");
  return s;
}

bool safe_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

// Parses the "files" and "tensors" members of metadata.json.
void parse_tensor_index(const json& j, CheckpointIndex& index, const IndexError& fail) {
  const auto files = j.find("files");
  if (files == j.end() || !files->is_object()) throw fail("missing or non-object \"files\"");
  for (auto it = files->begin(); it != files->end(); ++it) {
    const std::string what = concat("files entry '", it.key(), "'");
    if (!safe_file_name(it.key())) throw fail(what, " is not a plain file name");
    if (!it.value().is_object()) throw fail(what, " is not an object");
    const int64_t bytes = get_int(it.value(), "bytes", what, fail);
    if (bytes < 0) throw fail(what, ": negative size");
    index.files[it.key()] = static_cast<uint64_t>(bytes);
    // Checkpoints written before checksums existed have none (they load unverified).
    if (it.value().contains("crc32c")) {
      const int64_t crc = get_int(it.value(), "crc32c", what, fail);
      if (crc < 0 || crc > 0xffffffffLL) throw fail(what, ": crc32c ", crc, " is not 32-bit");
      index.checksums[it.key()] = static_cast<uint32_t>(crc);
    }
  }
  const auto tensors = j.find("tensors");
  if (tensors == j.end() || !tensors->is_object()) throw fail("missing or non-object \"tensors\"");
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    const std::string what = concat("tensor '", it.key(), "'");
    const json& t = it.value();
    if (!t.is_object()) throw fail(what, " is not an object");
    SavedTensor st;
    st.dtype = get_string(t, "dtype", what, fail);
    const auto esize = safetensors::dtype_size(st.dtype);
    if (!esize) throw fail(what, ": unknown dtype '", st.dtype, "'");
    st.shape = get_ints(t, "shape", what, fail);
    if (st.shape.size() > static_cast<size_t>(Shape::kMaxDims))
      throw fail(what, ": shape ", shape_str(st.shape), " has too many dimensions");
    const auto pieces = t.find("pieces");
    if (pieces == t.end() || !pieces->is_array())
      throw fail(what, ": missing or non-array \"pieces\"");
    for (size_t i = 0; i < pieces->size(); ++i) {
      SavedPiece p = parse_piece((*pieces)[i], st.shape, *esize, concat(what, " piece ", i), fail);
      if (!index.files.count(p.file))
        throw fail(what, " piece ", i, ": file '", p.file, "' is not listed in \"files\"");
      st.pieces.push_back(std::move(p));
    }
    index.tensors.emplace(it.key(), std::move(st));
  }
}

// Opens the shard files and checks them against the index.
std::map<std::string, safetensors::File> open_files(const CheckpointIndex& index,
                                                    const std::set<std::string>& names) {
  std::map<std::string, std::vector<std::pair<const std::string*, const SavedPiece*>>> by_file;
  std::map<std::string, const SavedTensor*> tensor_of;
  for (const auto& [name, t] : index.tensors)
    for (const SavedPiece& p : t.pieces)
      if (names.count(p.file)) {
        by_file[p.file].emplace_back(&name, &p);
        tensor_of[name] = &t;
      }
  std::map<std::string, safetensors::File> out;
  for (const std::string& f : names) {
    const std::string path = (fs::path(index.path) / f).string();
    const auto rec = index.files.find(f);
    if (rec == index.files.end())
      throw InputError(concat("checkpoint ", index.path, ": no file '", f, "' in ", kMetadataFile));
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw InputError(
          concat("checkpoint file ", path, " is missing (listed in ", kMetadataFile, ")"));
    const auto size = fs::file_size(path, ec);
    if (!ec && size != rec->second)
      throw InputError(concat("checkpoint file ", path, ": ", size, " bytes, but ", kMetadataFile,
                              " records ", rec->second, size < rec->second ? " (truncated?)" : ""));
    // The bytes themselves: a shard overwritten in place (same size) is refused, naming it.
    if (const auto sum = index.checksums.find(f); sum != index.checksums.end()) {
      const uint32_t got = crc32c_of_file(path);
      if (got != sum->second)
        throw InputError(concat("checkpoint file ", path, ": CRC-32C ", got, " but ", kMetadataFile,
                                " records ", sum->second,
                                " (the file is corrupt; load an older checkpoint with "
                                "checkpoint.load=DIR/iter_NNNNNNN)"));
    }
    safetensors::File file(path);
    if (file.file_size() != rec->second)
      throw InputError(concat("checkpoint file ", path, ": ", file.file_size(), " bytes, but ",
                              kMetadataFile, " records ", rec->second));
    const auto& entries = by_file[f];
    if (file.tensors().size() != entries.size())
      throw InputError(concat("checkpoint file ", path, ": holds ", file.tensors().size(),
                              " tensors, ", kMetadataFile, " lists ", entries.size(),
                              " pieces in it"));
    for (const auto& [name, p] : entries) {
      const safetensors::TensorInfo* info = file.find(p->key);
      const std::string what =
          concat("checkpoint file ", path, ": tensor '", p->key, "' (piece of '", *name, "')");
      if (!info) throw InputError(concat(what, " is missing"));
      if (info->dtype != tensor_of[*name]->dtype)
        throw InputError(concat(what, " has dtype ", info->dtype, ", ", kMetadataFile, " says ",
                                tensor_of[*name]->dtype));
      if (info->numel() != p->geometry.count())
        throw InputError(concat(what, " has ", info->numel(), " elements, ", kMetadataFile,
                                " says ", p->geometry.count()));
      if (info->begin != p->data_begin || info->end != p->data_end)
        throw InputError(concat(what, " is at bytes [", info->begin, ", ", info->end, "), ",
                                kMetadataFile, " says [", p->data_begin, ", ", p->data_end, ")"));
    }
    out.emplace(f, std::move(file));
  }
  return out;
}

std::string describe(const TensorPiece& p, const PieceGeometry& g) {
  std::string s = concat("piece of '", p.name, "'");
  if (!p.shard.replicated())
    s += concat(" (shard ", p.shard.index, "/", p.shard.count, " along dim ", p.shard.dim, ")");
  if (!g.is_full_box()) s += concat(" flat [", g.flat_begin, ", ", g.flat_end, ")");
  return s;
}

}  // namespace megatron::checkpoint::detail
