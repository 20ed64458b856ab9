#pragma once
// The backends of each device, in one place: its ops (kernels/common/device_ops.h), the
// communicators that carry its tensors and the choice of a process's device on a node. Which
// backends exist is a property of the build (a CUDA build has the CPU's and CUDA's); code above
// asks here instead of testing MEGATRON_WITH_CUDA. A model, the trainer's process groups and
// inference pick their backends from these when they are built, so a device without one is an error
// naming the build then, not at the first op.
#include <memory>

#include "kernels/common/device_ops.h"
#include "megatron/parallel/communicator.h"

namespace megatron::backend {

// The ops of `device`; an error naming the device (after `user`, e.g. the op that asked) when
// this build has no backend for it.
const ops::DeviceOps& device_ops(Device device, const char* user = "ops");

// The communicator for `device` tensors among the ranks of `group`, or nullptr when `group`
// itself carries them: on the CPU, for a group of one, or when `group` already is one of the
// device's (NCCL). On CUDA: a new NCCL communicator with the members, rank order, name and
// timeout of `group`, which must be an MPI group; collective over the group (every member calls
// this in the same order).
std::unique_ptr<parallel::Communicator> device_communicator(Device device,
                                                            parallel::Communicator& group);

// Makes this process use its share of `device` on the node: on CUDA the GPU local_rank % the
// visible GPUs, returned; on the CPU nothing (returns -1). The device must be available
// (device_available) — callers check it first to name their flag or key.
int select_device_for_local_rank(Device device, int local_rank);

}  // namespace megatron::backend
