#include "megatron/core/op_clock.h"

#include <chrono>

namespace megatron {

void HostOpClock::mark() {
  ns_.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count());
}

std::vector<double> HostOpClock::resolve() {
  std::vector<double> out;
  out.reserve(ns_.size());
  for (int64_t t : ns_) out.push_back(static_cast<double>(t - ns_.front()) * 1e-9);
  ns_.clear();
  return out;
}

}  // namespace megatron
