#pragma once
// Human-readable sizes for the tools' reports.
#include <cstdio>
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

}  // namespace megatron
