#pragma once
// Hugging Face safetensors, read and written without copying tensor data through extra buffers.
//
// Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (starting with '{', padded
// with spaces so that 8 + N is a multiple of 8), then the data buffer. The JSON maps each tensor
// name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (byte offsets into the
// data buffer, row-major, little-endian) and may hold "__metadata__": {string: string}.
//
// The reader treats every file as hostile: the header length is checked against the file size
// (and a 100 MB cap), the JSON is checked for nesting depth and duplicate keys before it is
// used, every dtype, shape and range is validated (overflow-safe), the ranges must tile the data
// buffer exactly (no overlap, no hole, no trailing bytes, as the format requires). Any problem
// is an InputError that names the file and what is wrong; never a crash or an out-of-range read.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/checkpoint/file_io.h"
#include "megatron/core/dtype.h"
#include "megatron/core/tensor.h"

namespace megatron::checkpoint::safetensors {

// The header size limit (the reference implementation uses the same).
inline constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Element size of a safetensors dtype string ("F32", "BF16", "BOOL", "F8_E4M3", ...); nullopt
// when the name is not a safetensors dtype.
std::optional<size_t> dtype_size(std::string_view name);
// Our DType <-> the safetensors name ("F32" <-> DType::F32, "BF16" <-> DType::BF16, ...).
// to_dtype is nullopt for safetensors dtypes we have no DType for (BOOL, U32, U64, F8_*).
std::string_view dtype_string(DType dtype);
std::optional<DType> to_dtype(std::string_view name);

struct TensorInfo {
  std::string name;
  std::string dtype;  // safetensors name, e.g. "F32"
  size_t element_size = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data buffer
  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// An open, validated safetensors file. Reads use pread, so one File can serve many threads.
class File {
 public:
  // Opens and validates `path`; throws InputError naming the file on any problem.
  explicit File(const std::string& path);
  File(File&&) noexcept = default;
  File& operator=(File&&) noexcept = default;

  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }
  uint64_t data_start() const { return 8 + header_size_; }  // absolute offset of the data buffer
  // Tensors in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  const TensorInfo& get(std::string_view name) const;  // InputError naming file and tensor

  // Reads bytes [offset, offset + n) of tensor `t`'s data into dst (range-checked).
  void read_bytes(const TensorInfo& t, uint64_t offset, uint64_t n, void* dst) const;
  // The whole tensor as an owning CPU tensor; its dtype must have a DType.
  Tensor read(std::string_view name) const;

 private:
  std::string path_;
  io::Fd fd_;
  uint64_t file_size_ = 0, header_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::map<std::string, std::string> metadata_;
};

// Validates a header (the JSON bytes after the length field) for a file of `file_size` bytes.
// Exposed for fuzzing; `path` only names the source in errors.
struct Header {
  std::vector<TensorInfo> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
};
Header parse_header(std::string_view json, uint64_t data_bytes, const std::string& path);

// One tensor to write: `data` points at nbytes() bytes (numel * element size) that stay valid
// until Writer::write returns.
struct WriteEntry {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Entries may be added without data when the Writer only lays out a StreamWriter's file.
class Writer {
 public:
  void add(WriteEntry entry);
  void add(std::string name, const Tensor& t);  // CPU tensor; data must outlive write()
  void set_metadata(std::string key, std::string value) {
    metadata_[std::move(key)] = std::move(value);
  }
  // The header JSON exactly as write() stores it (padded), and the total file size.
  std::string header() const;
  uint64_t file_size() const;
  // Writes the file (data in add() order) and, if `sync`, fsyncs it; returns the CRC-32C of the
  // bytes written. Errors (Error) name `path`.
  uint32_t write(const std::string& path, bool sync = true) const;
  // Byte range of entry i in the data buffer.
  std::pair<uint64_t, uint64_t> data_offsets(size_t i) const;
  size_t size() const { return entries_.size(); }
  const std::string& dtype_of(size_t i) const { return entries_.at(i).dtype; }

 private:
  std::vector<WriteEntry> entries_;
  std::vector<uint64_t> offsets_{0};
  std::map<std::string, std::string> metadata_;
};

// A file whose header is known before its data (a Writer with entries but no data lays it out):
// the constructor writes the header, the tensor bytes then arrive in any order and any pieces
// through write_at (bounded memory), and finish() checks every entry was filled, fsyncs, and
// returns the CRC-32C of the file's bytes (read back). Errors name the path.
class StreamWriter {
 public:
  StreamWriter(Writer layout, std::string path);
  const Writer& layout() const { return layout_; }
  const std::string& path() const { return path_; }
  // Bytes [offset, offset + n) of entry `entry`'s data.
  void write_at(size_t entry, uint64_t offset, const void* data, uint64_t n);
  uint32_t finish(bool sync = true);

 private:
  Writer layout_;
  std::string path_;
  io::Fd fd_;
  uint64_t data_start_ = 0;
  std::vector<uint64_t> written_;
};

}  // namespace megatron::checkpoint::safetensors
