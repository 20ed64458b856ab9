#pragma once
// Helpers of the Megatron-LM interop tests (test_megatron_import.cpp, test_megatron_export.cpp):
// the fixtures Megatron-Core saved, a scratch directory (empty or a fixture's copy), and the
// InputError text of a refused call.
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::mlm_test {

namespace fs = std::filesystem;

inline fs::path fixture(const std::string& name) {
  return fs::path(MEGATRON_SOURCE_DIR) / "tests" / "fixtures" / "megatron" / name;
}

class Scratch {
 public:
  explicit Scratch(const std::string& copy_of = "") {
    path_ = fs::temp_directory_path() /
            ("mlm_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    if (copy_of.empty())
      fs::create_directories(path_);
    else
      fs::copy(fixture(copy_of), path_, fs::copy_options::recursive);
  }
  ~Scratch() { fs::remove_all(path_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

inline std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace megatron::mlm_test
