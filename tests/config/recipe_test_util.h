#pragma once
// Helpers shared by the recipe tests: fixture paths, temporary recipe files, error capture.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>

#include "megatron/core/error.h"
#include "tests/support/test_paths.h"

namespace megatron::config::testing {

inline std::string source_path(const std::string& rel) {
  return std::string(MEGATRON_SOURCE_DIR) + "/" + rel;
}
inline std::string fixture(const std::string& rel) {
  return source_path("tests/fixtures/recipes/" + rel);
}

// Runs f and returns the InputError message; fails the test if f does not throw one.
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected megatron::InputError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected megatron::InputError, nothing was thrown";
  return {};
}

// A scratch directory removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "_" + info->name() : "x";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    dir_ = std::filesystem::temp_directory_path() /
           ("megatron_config_" + std::to_string(::getpid()) + "_" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  // Writes `text` to dir/rel (creating folders) and returns the full path.
  std::string write(const std::string& rel, const std::string& text) const {
    auto p = dir_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace megatron::config::testing
