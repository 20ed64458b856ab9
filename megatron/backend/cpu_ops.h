#pragma once
// The CPU backend of the ops (kernels/common/device_ops.h): the kernels/cpu kernels over host
// tensors, fp32 math. fp32 and bf16 tensors are read as stored where the kernels are templated
// on the storage type (elementwise, norms, embedding, cross-entropy) and bf16 linear layers run
// native bf16 GEMMs where the CPU has them; other 16-bit tensors are widened into fp32 copies
// and the outputs rounded once (backend/float_args.h). Each method checks the dtype contract
// the CUDA backend shares (FloatArgs), so a mix the GPU would refuse fails in CPU tests too.
// Definitions: cpu_ops.cpp, cpu_ops_attention.cpp, cpu_ops_loss.cpp, cpu_ops_moe.cpp.
#include "kernels/common/device_ops.h"

namespace megatron::ops {

class CpuOps final : public DeviceOps {
 public:
  Device device() const override { return Device::CPU; }
  MEGATRON_DEVICE_OPS_OVERRIDES
};

}  // namespace megatron::ops
