#pragma once
// A communicator that forwards every call to another and adds the seconds this rank spends in
// it to a counter: each blocking call, each wait() of an asynchronous one (posting an
// asynchronous call is counted too; it is short). That is the communication the rank waited for,
// the time a step's split (training/step_split.h) calls exposed, and where a straggler's peers
// show its slowness. On CUDA (NCCL) calls are queued on the device stream and return early, so
// the counter sees the host side only.
#include <memory>

#include "megatron/parallel/communicator.h"

namespace megatron::parallel {

// `inner` and `seconds` must outlive the returned communicator.
std::unique_ptr<Communicator> make_timed_communicator(Communicator& inner, double& seconds);

}  // namespace megatron::parallel
