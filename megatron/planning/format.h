#pragma once
// Number formatting shared by the planner's reports and search table.
#include <iomanip>
#include <sstream>
#include <string>

namespace megatron::planning::detail {

// Bytes as GB (1e9) with `precision` decimals.
inline std::string gb(double bytes, int precision = 2) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << bytes / 1e9;
  return os.str();
}

// 124.4M, 6.738B, 512K: four significant digits.
inline std::string human_count(double n) {
  std::ostringstream os;
  os << std::setprecision(4);
  if (n >= 1e9)
    os << n / 1e9 << "B";
  else if (n >= 1e6)
    os << n / 1e6 << "M";
  else if (n >= 1e3)
    os << n / 1e3 << "K";
  else
    os << n;
  return os.str();
}

}  // namespace megatron::planning::detail
