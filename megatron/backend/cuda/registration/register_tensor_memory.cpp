// Registers the CUDA backend's tensor memory (tensor_memory.h) for Device::CUDA when the
// program starts. This object file is linked into every executable that links megatron_cuda,
// directly or through a static library ($<TARGET_OBJECTS> in kernels/CMakeLists.txt): as a
// member of the static library it would never be pulled in, since nothing refers to it.
#include "megatron/backend/cuda/tensor_memory.h"

namespace {

[[maybe_unused]] const bool g_registered = [] {
  megatron::cuda::register_tensor_memory();
  return true;
}();

}  // namespace
