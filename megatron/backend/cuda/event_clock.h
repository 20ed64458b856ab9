#pragma once
// The CUDA OpClock (megatron/core/op_clock.h): events recorded on the current stream, reused
// from a pool, so the op profiler times what the GPU ran rather than when the host launched it.
#include <memory>

#include "megatron/core/op_clock.h"

namespace megatron::cuda {

std::unique_ptr<OpClock> make_event_clock();

}  // namespace megatron::cuda
