#include "megatron/checkpoint/torch_save.h"

#include "megatron/checkpoint/zip_reader.h"
#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

constexpr uint64_t kMax32 = 0xFFFFFFFFu;
constexpr uint64_t kAlign = 64;

void put(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}

const char* storage_class(DType d) {
  switch (d) {
    case DType::F32:
      return "FloatStorage";
    case DType::BF16:
      return "BFloat16Storage";
    case DType::F16:
      return "HalfStorage";
    case DType::F64:
      return "DoubleStorage";
    case DType::I64:
      return "LongStorage";
    case DType::I32:
      return "IntStorage";
    case DType::U8:
      return "ByteStorage";
    default:
      MT_CHECK(false, "no torch storage class for ", dtype_name(d));
  }
  return "";
}

}  // namespace

Py torch_tensor_reference(int64_t key, DType dtype, const std::vector<int64_t>& shape) {
  int64_t numel = 1;
  std::vector<Py> size, stride(shape.size());
  for (int64_t d : shape) size.push_back(Py::integer_value(d)), numel *= d;
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) stride[i] = Py::integer_value(s), s *= shape[i];
  // ('storage', class, key, location, numel), as torch.save's persistent_id
  const Py id = Py::tuple({Py::str("storage"), Py::global("torch", storage_class(dtype)),
                           Py::str(std::to_string(key)), Py::str("cpu"), Py::integer_value(numel)});
  return Py::reduce(Py::global("torch._utils", "_rebuild_tensor_v2"),
                    {Py::persistent(id), Py::integer_value(0), Py::tuple(size), Py::tuple(stride),
                     Py::boolean_value(false), Py::ordered_dict({})});
}

TorchArchiveWriter::TorchArchiveWriter(std::ofstream& out, std::string archive, std::string where)
    : out_(out), archive_(std::move(archive)), where_(std::move(where)) {
  base_ = static_cast<uint64_t>(out_.tellp());
  MT_CHECK(out_.good(), where_, ": cannot write");
}

uint64_t TorchArchiveWriter::position() const {
  return static_cast<uint64_t>(out_.tellp()) - base_;
}

void TorchArchiveWriter::begin_entry(const std::string& name, uint64_t size) {
  MT_CHECK(!open_, "torch archive: an entry is already open");
  Entry e;
  e.name = archive_ + "/" + name;
  e.header = position();
  e.size = size;
  const bool zip64 = size >= kMax32;
  std::string extra;
  if (zip64) {
    put(extra, 1, 2), put(extra, 16, 2), put(extra, size, 8), put(extra, size, 8);
  }
  // PyTorch's padding record ("FB"): the data starts at a multiple of 64.
  const uint64_t unpadded = e.header + 30 + e.name.size() + extra.size() + 4;
  const uint64_t pad = (kAlign - unpadded % kAlign) % kAlign;
  put(extra, 0x4246, 2), put(extra, pad, 2);
  extra.append(pad, 'Z');
  std::string h;
  put(h, 0x04034b50, 4), put(h, zip64 ? 45 : 20, 2), put(h, 0, 2), put(h, 0, 2);
  put(h, 0, 2), put(h, 0x21, 2), put(h, 0, 4);  // time, date (1980-01-01), crc (patched)
  put(h, zip64 ? kMax32 : size, 4), put(h, zip64 ? kMax32 : size, 4);
  put(h, e.name.size(), 2), put(h, extra.size(), 2);
  h += e.name + extra;
  out_.write(h.data(), static_cast<std::streamsize>(h.size()));
  entries_.push_back(e);
  open_ = true;
  written_ = 0;
}

void TorchArchiveWriter::write(const void* data, uint64_t bytes) {
  MT_CHECK(open_ && written_ + bytes <= entries_.back().size,
           "torch archive: write past the entry");
  out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  entries_.back().crc = zip_crc32(entries_.back().crc, data, bytes);
  written_ += bytes;
}

void TorchArchiveWriter::end_entry() {
  Entry& e = entries_.back();
  MT_CHECK(open_ && written_ == e.size, "torch archive: entry ", e.name, " got ", written_, " of ",
           e.size, " bytes");
  const auto end = out_.tellp();
  std::string crc;
  put(crc, e.crc, 4);
  out_.seekp(static_cast<std::streamoff>(base_ + e.header + 14));
  out_.write(crc.data(), 4);
  out_.seekp(end);
  open_ = false;
  MT_INPUT_CHECK(out_.good(), where_, ": cannot write (disk full?)");
}

void TorchArchiveWriter::whole_entry(const std::string& name, const std::string& data) {
  begin_entry(name, data.size());
  write(data.data(), data.size());
  end_entry();
}

void TorchArchiveWriter::write_pickle(const std::string& pickle) {
  whole_entry("data.pkl", pickle);
}

void TorchArchiveWriter::begin_storage(int64_t key, uint64_t bytes) {
  begin_entry("data/" + std::to_string(key), bytes);
}

void TorchArchiveWriter::end_storage() { end_entry(); }

uint64_t TorchArchiveWriter::finish() {
  whole_entry("byteorder", "little");
  whole_entry("version", "3\n");
  const uint64_t dir_start = position();
  std::string dir;
  for (const Entry& e : entries_) {
    const bool zip64 = e.size >= kMax32 || e.header >= kMax32;
    std::string extra;
    if (zip64) {
      put(extra, 1, 2), put(extra, 24, 2);
      put(extra, e.size, 8), put(extra, e.size, 8), put(extra, e.header, 8);
    }
    put(dir, 0x02014b50, 4), put(dir, 45, 2), put(dir, zip64 ? 45 : 20, 2), put(dir, 0, 2);
    put(dir, 0, 2), put(dir, 0, 2), put(dir, 0x21, 2), put(dir, e.crc, 4);
    put(dir, zip64 ? kMax32 : e.size, 4), put(dir, zip64 ? kMax32 : e.size, 4);
    put(dir, e.name.size(), 2), put(dir, extra.size(), 2), put(dir, 0, 2), put(dir, 0, 2);
    put(dir, 0, 2), put(dir, 0, 4), put(dir, zip64 ? kMax32 : e.header, 4);
    dir += e.name + extra;
  }
  const uint64_t dir_size = dir.size(), n = entries_.size();
  const bool zip64 = dir_start >= kMax32 || n >= 0xFFFF;
  if (zip64) {
    const uint64_t record = dir_start + dir_size;
    put(dir, 0x06064b50, 4), put(dir, 44, 8), put(dir, 45, 2), put(dir, 45, 2);
    put(dir, 0, 4), put(dir, 0, 4), put(dir, n, 8), put(dir, n, 8);
    put(dir, dir_size, 8), put(dir, dir_start, 8);
    put(dir, 0x07064b50, 4), put(dir, 0, 4), put(dir, record, 8), put(dir, 1, 4);
  }
  put(dir, 0x06054b50, 4), put(dir, 0, 2), put(dir, 0, 2);
  put(dir, zip64 ? 0xFFFF : n, 2), put(dir, zip64 ? 0xFFFF : n, 2);
  put(dir, zip64 ? kMax32 : dir_size, 4), put(dir, zip64 ? kMax32 : dir_start, 4), put(dir, 0, 2);
  out_.write(dir.data(), static_cast<std::streamsize>(dir.size()));
  MT_INPUT_CHECK(out_.good(), where_, ": cannot write (disk full?)");
  return position();
}

}  // namespace megatron::checkpoint
