#pragma once
// Collectives over host arrays (routing, counts) for an MoE layer whose tensors live on
// `device`: in place on the CPU; elsewhere staged through device tensors, because a device's
// communicators (NCCL) move device memory only. A group of one is the identity and is not
// called: on a device its communicator may be a host-only MPI group of one.
#include <cstdint>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron::moe {

// host: a CPU tensor, reduced in place.
void all_reduce_host(parallel::Communicator& group, Tensor host, parallel::ReduceOp op,
                     Device device);
// in, out: CPU tensors (out holds group.size() x in).
void all_gather_host(parallel::Communicator& group, const Tensor& in, Tensor out, Device device);
// Communicator::all_to_all over CPU tensors.
void all_to_all_host(parallel::Communicator& group, const Tensor& in,
                     const std::vector<int64_t>& send_counts, Tensor out,
                     const std::vector<int64_t>& recv_counts, Device device);

// The host vector `v` as a tensor on `device`: a view of it on the CPU (v must outlive it), a
// copy elsewhere.
template <typename T>
Tensor host_vector_on(std::vector<T>& v, DType dtype, Device device) {
  const Tensor host = Tensor::wrap(v.data(), {static_cast<int64_t>(v.size())}, dtype);
  return host.to(device);
}

}  // namespace megatron::moe
