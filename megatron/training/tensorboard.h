#pragma once
// A minimal TensorBoard scalar writer (no TensorFlow/protobuf dependency): an event file
// <dir>/events.out.tfevents.<unix seconds>.<hostname> of TFRecords, each holding a hand-encoded
// tensorflow.Event. The first record carries file_version "brain.Event:2"; add_scalar appends an
// Event{wall_time, step, summary{value{tag, simple_value}}} and flushes, so TensorBoard shows the
// curve while training runs. Errors (cannot create the directory or write) are InputErrors
// naming the path and the recipe key logging.tensorboard_dir.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace megatron::training {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78); crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n);
inline uint32_t crc32c(std::string_view s) { return crc32c(s.data(), s.size()); }
// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& dir);
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, int64_t step, double value);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& data);

  std::string path_;
  std::ofstream out_;
};

}  // namespace megatron::training
