#pragma once
// Megatron's MMIDIDX indexed dataset, byte for byte.
//
// PREFIX.bin: the tokens of every sequence, back to back, no header.
// PREFIX.idx (little-endian, no padding):
//   offset 0   char[9]  magic "MMIDIDX\0\0"
//   offset 9   u64      version = 1
//   offset 17  u8       dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
//                       7 float32, 8 uint16
//   offset 18  u64      N = number of sequences
//   offset 26  u64      D = number of document boundaries (documents + 1)
//   offset 34  int32    lengths[N]          (tokens per sequence)
//              int64    pointers[N]         (byte offset of each sequence in .bin)
//              int64    document_indices[D] (0, then the end sequence of each document; an
//                                            empty document repeats the previous value)
// A GPT corpus has one sequence per document; sentence-split data has several.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "megatron/core/dtype.h"

namespace megatron::data {

// Megatron's dtype codes. Token files use the integer ones (uint16 and int32 in practice).
uint8_t indexed_dtype_code(DType dtype);  // throws InputError for bf16/fp16
DType indexed_dtype_from_code(uint8_t code, const std::string& file_for_errors);
// Megatron's rule for token files: uint16 when vocab_size < 65500, else int32.
DType optimal_token_dtype(int64_t vocab_size);

class IndexedDataset;

class IndexedDatasetWriter {
 public:
  // Opens PREFIX.bin for writing (truncating). dtype must be an integer type.
  IndexedDatasetWriter(const std::string& prefix, DType dtype);
  ~IndexedDatasetWriter();  // an unfinalized writer removes its partial files
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One sequence forming a whole document (the GPT case). An empty span writes an empty
  // document: no sequence, but a document boundary.
  void add_document(std::span<const int32_t> tokens);
  // Sentence-split data: several add_sequence calls, then end_document.
  void add_sequence(std::span<const int32_t> tokens);
  void end_document();
  // Appends every sequence and document of `other` (same dtype required): merge_datasets.
  void add_index(const IndexedDataset& other);
  // Writes PREFIX.idx (via a temporary file renamed into place) and closes PREFIX.bin.
  void finalize();

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }
  DType dtype() const { return dtype_; }

 private:
  void write_bytes(const void* data, size_t n);

  std::string prefix_;
  DType dtype_;
  struct File;
  std::unique_ptr<File> bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> doc_idx_{0};
  std::vector<unsigned char> convert_buf_;
  int64_t tokens_ = 0;
  bool finalized_ = false;
};

class IndexedDataset {
 public:
  // Memory-maps PREFIX.idx and PREFIX.bin and validates them completely (magic, version,
  // dtype code, counts against the file size, lengths >= 0, pointers contiguous from 0 and
  // ending exactly at the .bin size, document indices starting at 0, non-decreasing, ending
  // at N). Every problem is an InputError naming the file and the inconsistency.
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  int64_t num_sequences() const { return n_; }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return total_tokens_; }
  int64_t sequence_length(int64_t i) const;
  int64_t sequence_pointer(int64_t i) const;  // byte offset in .bin
  DType dtype() const { return dtype_; }
  // Reads tokens [offset, offset+count) of a sequence, converted to int32. Out-of-range
  // arguments throw megatron::Error; a stored value outside int32 throws InputError.
  void read(int64_t sequence, int64_t offset, int64_t count, int32_t* out) const;
  std::vector<int32_t> read(int64_t sequence) const;
  std::span<const int64_t> document_indices() const { return doc_idx_; }
  // The raw .bin bytes (for merging).
  std::span<const unsigned char> bin_bytes() const { return {bin_data_, bin_size_}; }

 private:
  std::string prefix_, idx_path_, bin_path_;
  struct Mapping;
  static std::unique_ptr<Mapping> map_file(const std::string& path);
  std::unique_ptr<Mapping> idx_map_, bin_map_;
  const unsigned char* idx_data_ = nullptr;
  const unsigned char* bin_data_ = nullptr;
  size_t bin_size_ = 0;
  DType dtype_ = DType::U16;
  int64_t n_ = 0;
  size_t lengths_off_ = 0, pointers_off_ = 0;
  std::vector<int64_t> doc_idx_;
  int64_t total_tokens_ = 0;
};

}  // namespace megatron::data
