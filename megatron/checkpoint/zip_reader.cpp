#include "megatron/checkpoint/zip_reader.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <set>

#include "megatron/core/error.h"

namespace megatron::checkpoint {
namespace {

constexpr uint32_t kLocal = 0x04034b50, kCentral = 0x02014b50, kEnd = 0x06054b50;
constexpr uint32_t kEnd64 = 0x06064b50, kLocator64 = 0x07064b50;
constexpr uint64_t kMaxEntries = 1 << 20;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint32_t zip_crc32(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

ZipArchive::ZipArchive(const std::string& path) : path_(path) {
  std::error_code ec;
  file_size_ = std::filesystem::file_size(path, ec);
  MT_INPUT_CHECK(!ec, path, ": cannot read (", ec.message(), ")");
  file_.open(path, std::ios::binary);
  MT_INPUT_CHECK(file_.good(), path, ": cannot open");
  read_directory();
}

ZipArchive::ZipArchive(const std::string& path, uint64_t base, uint64_t length)
    : path_(concat(path, "@", base)), base_(base), file_size_(length) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  MT_INPUT_CHECK(!ec, path, ": cannot read (", ec.message(), ")");
  MT_INPUT_CHECK(base <= size && length <= size - base, path, ": an archive at bytes ", base, "..",
                 base + length, " lies past the end of the ", size, "-byte file (truncated?)");
  file_.open(path, std::ios::binary);
  MT_INPUT_CHECK(file_.good(), path, ": cannot open");
  read_directory();
}

void ZipArchive::read_at(uint64_t offset, void* out, uint64_t bytes, const std::string& what) {
  MT_INPUT_CHECK(offset <= file_size_ && bytes <= file_size_ - offset, path_, ": ", what,
                 " (bytes ", offset, "..", offset + bytes, ") lies past the end of the ",
                 file_size_, "-byte file (truncated?)");
  file_.clear();
  file_.seekg(static_cast<std::streamoff>(base_ + offset));
  file_.read(static_cast<char*>(out), static_cast<std::streamsize>(bytes));
  MT_INPUT_CHECK(file_.good(), path_, ": cannot read ", what);
}

// The end record (the last one in the file's final 64 KiB + 22 bytes), ZIP64's when the counts
// overflow: the central directory's entry count, size and offset.
ZipArchive::Directory ZipArchive::find_directory() {
  const uint64_t tail = std::min<uint64_t>(file_size_, 65535 + 22);
  std::vector<uint8_t> buf(tail);
  read_at(file_size_ - tail, buf.data(), tail, "the end of the archive");
  int64_t at = static_cast<int64_t>(tail) - 22;
  while (at >= 0 && le(&buf[static_cast<size_t>(at)], 4) != kEnd) --at;
  MT_INPUT_CHECK(at >= 0, path_, ": not a zip archive (no end of central directory)");
  const uint8_t* end = &buf[static_cast<size_t>(at)];
  Directory d{le(end + 10, 2), le(end + 12, 4), le(end + 16, 4)};
  const uint64_t end_offset = file_size_ - tail + static_cast<uint64_t>(at);
  if (d.count == 0xFFFF || d.size == 0xFFFFFFFF || d.offset == 0xFFFFFFFF) {
    uint8_t locator[20], end64[56];
    MT_INPUT_CHECK(end_offset >= 20, path_, ": ZIP64 locator missing");
    read_at(end_offset - 20, locator, 20, "the ZIP64 locator");
    MT_INPUT_CHECK(le(locator, 4) == kLocator64, path_, ": ZIP64 locator missing");
    read_at(le(locator + 8, 8), end64, 56, "the ZIP64 end record");
    MT_INPUT_CHECK(le(end64, 4) == kEnd64, path_, ": bad ZIP64 end record");
    d = {le(end64 + 32, 8), le(end64 + 40, 8), le(end64 + 48, 8)};
  }
  MT_INPUT_CHECK(d.count <= kMaxEntries && d.size <= file_size_, path_, ": central directory of ",
                 d.count, " entries and ", d.size, " bytes is implausible");
  return d;
}

// Central directory entry `i` at dir[p] (46 bytes, name, extra, comment): its name, size, CRC
// and where its data starts (after its local header). Returns the next entry's position.
size_t ZipArchive::read_entry(const std::vector<uint8_t>& dir, size_t p, uint64_t i) {
  MT_INPUT_CHECK(p + 46 <= dir.size() && le(&dir[p], 4) == kCentral, path_,
                 ": central directory entry ", i, " is malformed");
  const uint8_t* e = &dir[p];
  const uint64_t flags = le(e + 8, 2), method = le(e + 10, 2);
  const uint64_t name_len = le(e + 28, 2), extra_len = le(e + 30, 2), comment_len = le(e + 32, 2);
  MT_INPUT_CHECK(p + 46 + name_len + extra_len + comment_len <= dir.size(), path_,
                 ": central directory entry ", i, " runs past the directory");
  Entry entry;
  entry.name.assign(reinterpret_cast<const char*>(e + 46), name_len);
  entry.crc32 = static_cast<uint32_t>(le(e + 16, 4));
  uint64_t packed = le(e + 20, 4), size = le(e + 24, 4), local = le(e + 42, 4);
  // ZIP64 extra field: the 64-bit values of the fields that overflowed, in this order.
  for (size_t x = 0; x + 4 <= extra_len;) {
    const uint8_t* f = e + 46 + name_len + x;
    const uint64_t id = le(f, 2), n = le(f + 2, 2);
    if (x + 4 + n > extra_len) break;
    size_t q = 4;
    auto widen = [&](uint64_t& v) {
      if (id != 1 || v != 0xFFFFFFFF) return;
      MT_INPUT_CHECK(q + 8 <= 4 + n, path_, ": entry '", entry.name, "': short ZIP64 field");
      v = le(f + q, 8);
      q += 8;
    };
    widen(size);
    widen(packed);
    widen(local);
    x += 4 + n;
  }
  MT_INPUT_CHECK(!(flags & 1), path_, ": entry '", entry.name, "' is encrypted");
  MT_INPUT_CHECK(method == 0 && packed == size, path_, ": entry '", entry.name,
                 "' is compressed (method ", method, "); torch.save stores entries uncompressed");
  MT_INPUT_CHECK(names_.insert(entry.name).second, path_, ": entry '", entry.name, "' twice");
  uint8_t header[30];
  read_at(local, header, 30, concat("the local header of '", entry.name, "'"));
  MT_INPUT_CHECK(le(header, 4) == kLocal, path_, ": entry '", entry.name,
                 "' has no local header where the directory says");
  entry.data_offset = local + 30 + le(header + 26, 2) + le(header + 28, 2);
  entry.size = size;
  MT_INPUT_CHECK(entry.data_offset <= file_size_ && size <= file_size_ - entry.data_offset, path_,
                 ": entry '", entry.name, "' (", size,
                 " bytes) runs past the end of the file (truncated?)");
  entries_.push_back(std::move(entry));
  return p + 46 + name_len + extra_len + comment_len;
}

void ZipArchive::read_directory() {
  const Directory d = find_directory();
  std::vector<uint8_t> dir(d.size);
  read_at(d.offset, dir.data(), d.size, "the central directory");
  size_t p = 0;
  for (uint64_t i = 0; i < d.count; ++i) p = read_entry(dir, p, i);
}

const ZipArchive::Entry* ZipArchive::find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

const ZipArchive::Entry* ZipArchive::find_suffix(const std::string& suffix) const {
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    const bool match = e.name.size() > suffix.size() &&
                       e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                       e.name[e.name.size() - suffix.size() - 1] == '/';
    if (!match) continue;
    MT_INPUT_CHECK(found == nullptr, path_, ": two entries end in '/", suffix, "' ('",
                   found ? found->name : "", "' and '", e.name, "')");
    found = &e;
  }
  return found;
}

std::vector<uint8_t> ZipArchive::read(const Entry& entry) {
  std::vector<uint8_t> out(entry.size);
  read_into(entry, out.data());
  return out;
}

void ZipArchive::read_into(const Entry& entry, void* out) {
  read_at(entry.data_offset, out, entry.size, concat("entry '", entry.name, "'"));
  MT_INPUT_CHECK(zip_crc32(0, out, entry.size) == entry.crc32, path_, ": entry '", entry.name,
                 "' fails its CRC-32 (corrupted)");
}

void ZipArchive::read_range(const Entry& entry, uint64_t offset, void* out, uint64_t bytes) {
  MT_INPUT_CHECK(offset <= entry.size && bytes <= entry.size - offset, path_, ": entry '",
                 entry.name, "' has ", entry.size, " bytes, ", offset + bytes, " wanted");
  read_at(entry.data_offset + offset, out, bytes, concat("entry '", entry.name, "'"));
}

}  // namespace megatron::checkpoint
