#include "megatron/training/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "megatron/core/error.h"

namespace megatron::training {
namespace {

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Protobuf wire encoding: keys are (field << 3) | wire type; 0 varint, 1 fixed64, 2
// length-delimited, 5 fixed32.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void put_key(std::string& out, uint32_t field, uint32_t wire) {
  put_varint(out, field << 3 | wire);
}
template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put_double(std::string& out, uint32_t field, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  put_key(out, field, 1);
  put_le(out, bits);
}
void put_float(std::string& out, uint32_t field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  put_key(out, field, 5);
  put_le(out, bits);
}
void put_bytes(std::string& out, uint32_t field, const std::string& s) {
  put_key(out, field, 2);
  put_varint(out, s.size());
  out += s;
}
void put_int64(std::string& out, uint32_t field, int64_t v) {
  put_key(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

std::string hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrc32cTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MT_INPUT_CHECK(!ec && std::filesystem::is_directory(dir),
                 "logging.tensorboard_dir: cannot create '", dir, "'",
                 ec ? ": " + ec.message() : std::string());
  const auto seconds = static_cast<int64_t>(wall_time());
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(seconds) + "." + hostname()))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  MT_INPUT_CHECK(out_.good(), "logging.tensorboard_dir: cannot open '", path_, "' for writing");
  std::string event;
  put_double(event, 1, wall_time());
  put_bytes(event, 3, "brain.Event:2");  // Event.file_version
  write_record(event);
  flush();
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  std::string v;  // Summary.Value
  put_bytes(v, 1, tag);
  put_float(v, 2, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string event;
  put_double(event, 1, wall_time());
  put_int64(event, 2, step);
  put_bytes(event, 5, summary);
  write_record(event);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string header;
  put_le<uint64_t>(header, data.size());
  std::string rec = header;
  put_le<uint32_t>(rec, masked_crc32c(header.data(), header.size()));
  rec += data;
  put_le<uint32_t>(rec, masked_crc32c(data.data(), data.size()));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  MT_INPUT_CHECK(out_.good(), "logging.tensorboard_dir: cannot write '", path_, "'");
}

void TensorBoardWriter::flush() {
  out_.flush();
  MT_INPUT_CHECK(out_.good(), "logging.tensorboard_dir: cannot write '", path_, "'");
}

}  // namespace megatron::training
