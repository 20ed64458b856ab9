#pragma once
// AdamW over host memory with explicit AVX-512 and AVX2 code picked at run time from the CPU's
// features (cpu_features.h), for the optimizer offloaded from a GPU (optimizer.offload: cpu):
// the host it runs on need not be the build machine's ISA twin, and its speed decides how much
// of the device-to-host copies it hides.
//
// Every lane performs math::adamw_update's operations in its order - multiply, add, divide,
// square root, each correctly rounded and none fused (this file and the reference are compiled
// with -ffp-contract=off) - so the three paths and kernels::ref::adamw_step agree bit for bit.
#include <cstdint>
#include <string_view>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cpu {

enum class HostAdamIsa : uint8_t { Scalar, Avx2, Avx512 };
std::string_view host_adam_isa_name(HostAdamIsa isa);
// The widest path this CPU (and OS) can run.
HostAdamIsa host_adam_isa();

// param, m, v updated in place for n elements; one thread (the offload pipeline runs it beside
// the copies). Throws when `isa` is wider than the CPU.
void host_adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                     const math::AdamWParams& p, HostAdamIsa isa = host_adam_isa());

}  // namespace megatron::kernels::cpu
