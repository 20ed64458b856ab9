#pragma once
// Shared by the libFuzzer targets: a scratch directory per process, writing the input to a file,
// and the rule every target follows: bad input may throw megatron::Error (InputError included),
// which is the parser refusing it; anything else (a crash, a sanitizer report, another
// exception, a hang) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "megatron/core/error.h"

namespace megatron::fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto p =
        std::filesystem::temp_directory_path() / ("megatron_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    return p;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = (scratch() / name).string();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Runs fn; megatron::Error (the parser's refusal) is expected, everything else propagates.
template <typename Fn>
int refuse_or_accept(Fn&& fn) {
  try {
    fn();
  } catch (const megatron::Error&) {
  }
  return 0;
}

}  // namespace megatron::fuzz
