#pragma once
// A reader of the zip archives torch.save writes (PyTorch checkpoints, Megatron-LM's
// model_optim_rng.pt and common.pt): the central directory (ZIP64 included), stored entries read
// whole or in ranges (tensors stream from their storages), each whole read checked against the
// entry's CRC-32. Compressed or encrypted entries, entries outside the file and names that do
// not add up are refused with an InputError naming the archive and the entry.
#include <cstdint>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace megatron::checkpoint {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint64_t data_offset = 0;  // of its bytes in the file
    uint64_t size = 0;
    uint32_t crc32 = 0;
  };

  explicit ZipArchive(const std::string& path);
  // An archive stored inside a file at bytes [base, base + length) (a distributed checkpoint's
  // .distcp file holds one torch.save archive per tensor item); its offsets count from base.
  ZipArchive(const std::string& path, uint64_t base, uint64_t length);

  // The file (with "@base" for an embedded archive): what errors name.
  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }
  // The entry of this exact name, or the only one ending in "/" + suffix (torch names them
  // ARCHIVE/data.pkl, ARCHIVE/data/0, ...); null when there is none. Two matches: InputError.
  const Entry* find(const std::string& name) const;
  const Entry* find_suffix(const std::string& suffix) const;
  // The whole entry, its CRC-32 checked.
  std::vector<uint8_t> read(const Entry& entry);
  // The same into `out` (entry.size bytes), with no second copy.
  void read_into(const Entry& entry, void* out);
  // `bytes` bytes of the entry from `offset` (not checked: a part of a storage).
  void read_range(const Entry& entry, uint64_t offset, void* out, uint64_t bytes);

 private:
  void read_at(uint64_t offset, void* out, uint64_t bytes, const std::string& what);
  struct Directory {
    uint64_t count = 0, size = 0, offset = 0;
  };
  Directory find_directory();
  size_t read_entry(const std::vector<uint8_t>& dir, size_t p, uint64_t i);
  void read_directory();

  std::string path_;
  std::ifstream file_;
  uint64_t base_ = 0;       // where the archive starts in the file
  uint64_t file_size_ = 0;  // the archive's size
  std::vector<Entry> entries_;
  std::set<std::string> names_;
};

// CRC-32 (IEEE 802.3, zip's checksum) continued from `crc` (0 to start).
uint32_t zip_crc32(uint32_t crc, const void* data, size_t n);

}  // namespace megatron::checkpoint
