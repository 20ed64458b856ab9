#pragma once
// The values the collective tests exchange and what a reduction of them gives: rank r
// contributes value<T>(r, i) at element i, small integers so that sums are exact in every dtype
// (u8 included: at most 4 ranks x 15).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "megatron/parallel/communicator.h"

namespace megatron::parallel::testing {

template <typename T>
T value(int r, int64_t i) {
  const int64_t v = (i * 7 + r * 3) % 16;
  if constexpr (std::is_signed_v<T> || std::is_floating_point_v<T>) return static_cast<T>(v - 5);
  return static_cast<T>(v);
}

// Element i of the reduction by `op` of every rank's value over a group of `size`.
template <typename T>
T expected_reduce(ReduceOp op, int64_t i, int size) {
  T acc = value<T>(0, i);
  for (int r = 1; r < size; ++r) {
    const T v = value<T>(r, i);
    if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc = static_cast<T>(acc + v);
    if (op == ReduceOp::Max) acc = std::max(acc, v);
    if (op == ReduceOp::Min) acc = std::min(acc, v);
  }
  if (op == ReduceOp::Avg) {
    if constexpr (std::is_floating_point_v<T>) acc = acc / static_cast<T>(size);
  }
  return acc;
}

}  // namespace megatron::parallel::testing
