// Where a test finds the source tree (fixtures, recipes, tokenizers), the build tree (bin/ with
// the tools it runs) and mpirun. Compiled-in defaults (this build's), each overridable from the
// environment: MEGATRON_TEST_SOURCE_DIR, MEGATRON_TEST_BINARY_DIR, MEGATRON_TEST_MPIEXEC, so
// the same programs run from tools/gpu_bundle.sh's folder on another machine. Kept out of the
// tests' compile lines so that clones of the repository share one compiler cache.
#pragma once
#include <string>

namespace megatron::testing {
const std::string& source_dir();
const std::string& binary_dir();
const std::string& mpiexec();
}  // namespace megatron::testing

#define MEGATRON_SOURCE_DIR (::megatron::testing::source_dir())
#define MEGATRON_BINARY_DIR (::megatron::testing::binary_dir())
#define MPIEXEC (::megatron::testing::mpiexec())
