#pragma once
// torch.save archives written without Python: a zip of stored entries (ARCHIVE/data.pkl, the
// storages ARCHIVE/data/<key>, ARCHIVE/byteorder, ARCHIVE/version), each storage's bytes aligned
// to 64 as PyTorch's writer places them, ZIP64 where sizes or offsets pass 4 GiB. The archive is
// appended to an open stream at its current position, so one file can hold several (a
// distributed checkpoint's .distcp file holds one per tensor chunk); offsets count from the
// archive's start. Storages stream: their bytes are written in pieces, the CRC-32 patched in.
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "megatron/checkpoint/pickle_writer.h"
#include "megatron/core/tensor.h"

namespace megatron::checkpoint {

// torch._utils._rebuild_tensor_v2 of storage `key` (a contiguous tensor from element 0): what
// a pickle holds for a tensor.
Py torch_tensor_reference(int64_t key, DType dtype, const std::vector<int64_t>& shape);

class TorchArchiveWriter {
 public:
  // `archive`: the folder name inside the zip (torch.save uses the file's stem).
  TorchArchiveWriter(std::ofstream& out, std::string archive, std::string where);
  // data.pkl, first (its storages are referenced by key, written after).
  void write_pickle(const std::string& pickle);
  // Storage `key` of `bytes` bytes, written by write() calls that add up to it.
  void begin_storage(int64_t key, uint64_t bytes);
  void write(const void* data, uint64_t bytes);
  void end_storage();
  // The byteorder and version records and the central directory; returns the archive's size.
  uint64_t finish();

 private:
  struct Entry {
    std::string name;
    uint64_t header = 0, size = 0;  // local header offset (from the archive's start)
    uint32_t crc = 0;
  };
  void begin_entry(const std::string& name, uint64_t size);
  void end_entry();
  void whole_entry(const std::string& name, const std::string& data);
  uint64_t position() const;

  std::ofstream& out_;
  std::string archive_, where_;
  uint64_t base_ = 0;
  std::vector<Entry> entries_;
  bool open_ = false;
  uint64_t written_ = 0;
};

}  // namespace megatron::checkpoint
