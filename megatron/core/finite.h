#pragma once
// NaN and inf in float data: the count, and the one phrase the errors that refuse them use
// (checkpoint loads, Hugging Face reads, generate's logits).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "megatron/core/error.h"

namespace megatron {

inline int64_t count_non_finite(const float* data, int64_t n) {
  return std::count_if(data, data + n, [](float v) { return !std::isfinite(v); });
}

// "3 non-finite values (NaN or inf)"
inline std::string non_finite_text(int64_t count) {
  return concat(count, " non-finite value", count == 1 ? "" : "s", " (NaN or inf)");
}

}  // namespace megatron
