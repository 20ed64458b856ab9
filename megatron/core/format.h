#pragma once
// Human-readable sizes for the tools' reports; a guard for a stream's number format.
#include <cstdio>
#include <ios>
#include <string>

namespace megatron {

// 512 B, 1.5 KiB, 3.2 GiB: binary units, one decimal above bytes.
inline std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

// Restores a stream's flags and precision when it goes out of scope, so that a report setting
// std::fixed / std::setprecision leaves the caller's number format as it found it.
class StreamFormatGuard {
 public:
  explicit StreamFormatGuard(std::ios_base& stream)
      : stream_(stream), flags_(stream.flags()), precision_(stream.precision()) {}
  ~StreamFormatGuard() {
    stream_.flags(flags_);
    stream_.precision(precision_);
  }
  StreamFormatGuard(const StreamFormatGuard&) = delete;
  StreamFormatGuard& operator=(const StreamFormatGuard&) = delete;

 private:
  std::ios_base& stream_;
  std::ios_base::fmtflags flags_;
  std::streamsize precision_;
};

}  // namespace megatron
