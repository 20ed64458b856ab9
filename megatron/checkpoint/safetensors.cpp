#include "megatron/checkpoint/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "megatron/checkpoint/crc32c.h"
#include "megatron/checkpoint/file_io.h"

namespace megatron::checkpoint::safetensors {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

namespace {

struct DTypeName {
  std::string_view name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8},
};

constexpr int kMaxDepth = 3;  // header object > tensor object > shape array

std::string error_name(std::string_view s) {
  // Names in errors: cap the length so a hostile header cannot flood the message.
  std::string out = "'";
  out.append(s.substr(0, 200));
  if (s.size() > 200) out += "...";
  out += "'";
  return out;
}

// Nesting depth outside strings; rejects deep documents before the recursive-ish DOM exists.
int max_depth(std::string_view json) {
  int depth = 0, deepest = 0;
  bool in_string = false, escape = false;
  for (char c : json) {
    if (in_string) {
      if (escape)
        escape = false;
      else if (c == '\\')
        escape = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

}  // namespace

std::optional<size_t> dtype_size(std::string_view name) {
  for (const auto& d : kDTypes)
    if (d.name == name) return d.size;
  return std::nullopt;
}

std::string_view dtype_string(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::BF16:
      return "BF16";
    case DType::F16:
      return "F16";
    case DType::I64:
      return "I64";
    case DType::I32:
      return "I32";
    case DType::I16:
      return "I16";
    case DType::I8:
      return "I8";
    case DType::U16:
      return "U16";
    case DType::U8:
      return "U8";
  }
  MT_CHECK(false, "invalid dtype code ", static_cast<int>(dtype));
  __builtin_unreachable();
}

std::optional<DType> to_dtype(std::string_view name) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I64, DType::I32,
                  DType::I16, DType::I8, DType::U16, DType::U8})
    if (dtype_string(t) == name) return t;
  return std::nullopt;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Header parse_header(std::string_view text, uint64_t data_bytes, const std::string& path) {
  using nlohmann::json;
  auto fail = [&](const auto&... parts) {
    return InputError(concat("safetensors file ", path, ": ", parts...));
  };
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{')
    throw fail("header is not a JSON object (it must start with '{')");
  if (max_depth(text) > kMaxDepth)
    throw fail("header JSON is nested deeper than ", kMaxDepth, " levels");

  // Duplicate keys are not allowed by the format; nlohmann would keep the last silently.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty())
          duplicate = parsed.get<std::string>();
        break;
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), on_event, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    throw fail("header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty()) throw fail("header has the key ", error_name(duplicate), " twice");
  if (!j.is_object()) throw fail("header is not a JSON object");

  Header h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw fail("__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw fail("__metadata__ value of ", error_name(m.key()), " is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = concat("tensor ", error_name(name));
    if (!v.is_object()) throw fail(where, " is not an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) throw fail(where, ": missing or non-string \"dtype\"");
    if (sh == v.end() || !sh->is_array()) throw fail(where, ": missing or non-array \"shape\"");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      throw fail(where, ": \"data_offsets\" must be an array [begin, end]");
    TensorInfo t;
    t.name = name;
    t.dtype = dt->get<std::string>();
    const auto esize = dtype_size(t.dtype);
    if (!esize) throw fail(where, ": unknown dtype ", error_name(t.dtype));
    t.element_size = *esize;
    uint64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        throw fail(where, ": shape ", sh->dump(),
                   " has a dimension that is not a non-negative integer");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(INT64_MAX) || mul_overflows(numel, dim, &numel))
        throw fail(where, ": shape ", sh->dump(), " overflows");
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (t.shape.size() > static_cast<size_t>(Shape::kMaxDims))
      throw fail(where, ": shape ", sh->dump(), " has more than ", Shape::kMaxDims, " dimensions");
    for (const json& o : *off)
      if (!o.is_number_unsigned() && !(o.is_number_integer() && o.get<int64_t>() >= 0))
        throw fail(where, ": data_offsets ", off->dump(), " are not non-negative integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end)
      throw fail(where, ": data_offsets ", off->dump(), " end before they begin");
    if (t.end > data_bytes)
      throw fail(where, ": data_offsets ", off->dump(), " reach past the data buffer (", data_bytes,
                 " bytes)");
    uint64_t bytes = 0;
    if (mul_overflows(numel, t.element_size, &bytes) || bytes != t.end - t.begin)
      throw fail(where, ": ", t.end - t.begin, " bytes in data_offsets ", off->dump(),
                 " but dtype ", t.dtype, " x shape ", sh->dump(), " needs ", numel, " x ",
                 t.element_size, " bytes");
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The ranges must tile the data buffer: no overlap, no hole, nothing after the last tensor.
  uint64_t covered = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin < covered)
      throw fail("tensors ", error_name(prev->name), " [", prev->begin, ", ", prev->end, ") and ",
                 error_name(t.name), " [", t.begin, ", ", t.end, ") overlap");
    if (t.begin > covered)
      throw fail("bytes [", covered, ", ", t.begin, ") of the data buffer belong to no tensor");
    covered = t.end;
    prev = &t;
  }
  if (covered != data_bytes)
    throw fail("the data buffer has ", data_bytes, " bytes but the tensors cover ", covered,
               " (truncated file or trailing bytes)");
  return h;
}

// ---- File --------------------------------------------------------------------------------

File::File(const std::string& path) : path_(path) {
  io::Fd fd = io::open_for_read(path);
  file_size_ = io::file_size(fd.get(), path);
  if (file_size_ < 8)
    throw InputError(concat("safetensors file ", path, ": ", file_size_,
                            " bytes, too short for the 8-byte header length"));
  unsigned char len[8];
  io::pread_all(fd.get(), len, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxHeaderBytes)
    throw InputError(concat("safetensors file ", path, ": header length ", n,
                            " exceeds the 100 MB limit (corrupt length field?)"));
  if (n > file_size_ - 8)
    throw InputError(concat("safetensors file ", path, ": header length ", n,
                            " reaches past the end of the ", file_size_,
                            "-byte file (truncated?)"));
  std::string text(n, '\0');
  if (n) io::pread_all(fd.get(), text.data(), n, 8, path);
  header_size_ = n;
  Header h = parse_header(text, file_size_ - 8 - n, path);
  tensors_ = std::move(h.tensors);
  metadata_ = std::move(h.metadata);
  fd_ = std::move(fd);
  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const TensorInfo* File::find(std::string_view name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::get(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) throw InputError(concat("safetensors file ", path_, ": no tensor ", error_name(name)));
  return *t;
}

void File::read_bytes(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const {
  MT_CHECK(offset <= t.nbytes() && n <= t.nbytes() - offset, "read of bytes [", offset, ", +", n,
           ") outside tensor '", t.name, "' (", t.nbytes(), " bytes) in ", path_);
  if (n) io::pread_all(fd_.get(), dst, n, data_start() + t.begin + offset, path_);
}

Tensor File::read(std::string_view name) const {
  const TensorInfo& t = get(name);
  const auto dtype = to_dtype(t.dtype);
  if (!dtype)
    throw InputError(concat("safetensors file ", path_, ": tensor ", error_name(name),
                            " has dtype ", t.dtype, ", which has no tensor type here"));
  Tensor out = Tensor::empty(Shape(t.shape.begin(), t.shape.end()), *dtype);
  read_bytes(t, 0, t.nbytes(), out.raw());
  return out;
}

// ---- Writer ------------------------------------------------------------------------------

void Writer::add(WriteEntry e) {
  MT_CHECK(e.name != "__metadata__", "a tensor cannot be named __metadata__");
  for (const WriteEntry& o : entries_)
    MT_CHECK(o.name != e.name, "duplicate tensor name '", e.name, "'");
  const auto esize = dtype_size(e.dtype);
  MT_CHECK(esize.has_value(), "unknown safetensors dtype '", e.dtype, "'");
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    MT_CHECK(d >= 0, "negative dimension in the shape of '", e.name, "'");
    numel *= static_cast<uint64_t>(d);
  }
  const uint64_t bytes = numel * *esize;
  offsets_.push_back(offsets_.back() + bytes);
  entries_.push_back(std::move(e));
}

void Writer::add(std::string name, const Tensor& t) {
  MT_CHECK(t.device() == Device::CPU, "safetensors writes CPU tensors ('", name, "')");
  add(WriteEntry{std::move(name), std::string(dtype_string(t.dtype())),
                 std::vector<int64_t>(t.shape().begin(), t.shape().end()), t.raw()});
}

std::pair<uint64_t, uint64_t> Writer::data_offsets(size_t i) const {
  MT_CHECK(i < entries_.size(), "entry ", i, " of ", entries_.size());
  return {offsets_[i], offsets_[i + 1]};
}

std::string Writer::header() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata_.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata_) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    const WriteEntry& e = entries_[i];
    j[e.name] = {
        {"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offsets_[i], offsets_[i + 1]}}};
  }
  std::string s = j.dump();
  s.append((8 - (8 + s.size()) % 8) % 8, ' ');
  return s;
}

uint64_t Writer::file_size() const { return 8 + header().size() + offsets_.back(); }

namespace {
std::string length_and_header(const std::string& h) {
  unsigned char len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
  return std::string(reinterpret_cast<const char*>(len), 8) + h;
}
}  // namespace

uint32_t Writer::write(const std::string& path, bool sync) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    MT_CHECK(offsets_[i + 1] == offsets_[i] || entries_[i].data != nullptr, "tensor '",
             entries_[i].name, "' has no data");
  const std::string h = header();
  io::Fd fd = io::open_for_write(path);
  // Header and length in one write; tensor data straight from the caller's memory.
  const std::string head = length_and_header(h);
  io::write_all(fd.get(), head.data(), head.size(), path);
  uint32_t crc = crc32c(0, head.data(), head.size());
  for (size_t i = 0; i < entries_.size(); ++i) {
    io::write_all(fd.get(), entries_[i].data, offsets_[i + 1] - offsets_[i], path);
    crc = crc32c(crc, entries_[i].data, offsets_[i + 1] - offsets_[i]);
  }
  if (sync) io::fsync_fd(fd.get(), path);
  fd.close(path);
  return crc;
}

// ---- StreamWriter ------------------------------------------------------------------------

StreamWriter::StreamWriter(Writer layout, std::string path)
    : layout_(std::move(layout)), path_(std::move(path)) {
  const std::string head = length_and_header(layout_.header());
  data_start_ = head.size();
  written_.assign(layout_.size(), 0);
  fd_ = io::open_for_write(path_);
  io::write_all(fd_.get(), head.data(), head.size(), path_);
}

void StreamWriter::write_at(size_t entry, uint64_t offset, const void* data, uint64_t n) {
  const auto [begin, end] = layout_.data_offsets(entry);
  MT_CHECK(offset <= end - begin && n <= end - begin - offset, "safetensors stream ", path_,
           ": bytes [", offset, ", ", offset + n, ") outside entry ", entry, " (", end - begin,
           " bytes)");
  if (n) io::pwrite_all(fd_.get(), data, n, data_start_ + begin + offset, path_);
  written_[entry] += n;
}

uint32_t StreamWriter::finish(bool sync) {
  for (size_t i = 0; i < written_.size(); ++i) {
    const auto [begin, end] = layout_.data_offsets(i);
    MT_CHECK(written_[i] == end - begin, "safetensors stream ", path_, ": entry ", i, " got ",
             written_[i], " of ", end - begin, " bytes");
  }
  if (sync) io::fsync_fd(fd_.get(), path_);
  fd_.close(path_);
  // The checksum of what is on disk, read back in pieces (memory stays bounded).
  const io::Fd in = io::open_for_read(path_);
  const uint64_t total = layout_.file_size();
  std::vector<char> buf(std::min<uint64_t>(total, uint64_t{8} << 20));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < total;) {
    const uint64_t n = std::min<uint64_t>(buf.size(), total - at);
    io::pread_all(in.get(), buf.data(), n, at, path_);
    crc = crc32c(crc, buf.data(), n);
    at += n;
  }
  return crc;
}

}  // namespace megatron::checkpoint::safetensors
