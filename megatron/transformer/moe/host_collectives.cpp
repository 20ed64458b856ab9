#include "megatron/transformer/moe/host_collectives.h"

namespace megatron::moe {

void all_reduce_host(parallel::Communicator& group, Tensor host, parallel::ReduceOp op,
                     Device device) {
  if (group.size() == 1) return;
  if (device == Device::CPU) return group.all_reduce(host, op);
  Tensor staged = host.to(device);
  group.all_reduce(staged, op);
  host.copy_from(staged);
}

void all_gather_host(parallel::Communicator& group, const Tensor& in, Tensor out, Device device) {
  if (group.size() == 1) return out.copy_from(in);
  if (device == Device::CPU) return group.all_gather(in, out);
  Tensor staged = Tensor::empty(out.shape(), out.dtype(), device);
  group.all_gather(in.to(device), staged);
  out.copy_from(staged);
}

void all_to_all_host(parallel::Communicator& group, const Tensor& in,
                     const std::vector<int64_t>& send_counts, Tensor out,
                     const std::vector<int64_t>& recv_counts, Device device) {
  if (group.size() == 1) return out.copy_from(in);
  if (device == Device::CPU) return group.all_to_all(in, send_counts, out, recv_counts);
  Tensor staged = Tensor::empty(out.shape(), out.dtype(), device);
  group.all_to_all(in.to(device), send_counts, staged, recv_counts);
  out.copy_from(staged);
}

}  // namespace megatron::moe
