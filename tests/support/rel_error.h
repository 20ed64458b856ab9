#pragma once
// The norm-relative error the backend tests compare devices with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace megatron::testing {

// max |a - b| / max |b| (b: the CPU reference); NaN where only one side has one is infinite.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(b[i])) continue;
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return den > 0 ? num / den : num;
}

}  // namespace megatron::testing
