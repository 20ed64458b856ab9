#include "tests/support/test_paths.h"

#include <cstdlib>

namespace megatron::testing {
namespace {

std::string from_env_or(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

}  // namespace

const std::string& source_dir() {
  static const std::string dir =
      from_env_or("MEGATRON_TEST_SOURCE_DIR", MEGATRON_DEFAULT_SOURCE_DIR);
  return dir;
}

const std::string& binary_dir() {
  static const std::string dir =
      from_env_or("MEGATRON_TEST_BINARY_DIR", MEGATRON_DEFAULT_BINARY_DIR);
  return dir;
}

const std::string& mpiexec() {
  static const std::string path = from_env_or("MEGATRON_TEST_MPIEXEC", MEGATRON_DEFAULT_MPIEXEC);
  return path;
}

}  // namespace megatron::testing
