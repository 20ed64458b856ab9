#include "megatron/tensor_parallel/mappings.h"

namespace megatron::tensor_parallel {

Shape full_sequence_shape(const Shape& local, const parallel::Communicator& tp) {
  Shape s = local;
  s[0] = local[0] * tp.size();
  return s;
}

void copy_to_region_backward(parallel::Communicator& tp, Tensor& dx) {
  if (tp.size() > 1) tp.all_reduce(dx, parallel::ReduceOp::Sum);
}

void reduce_from_region_forward(parallel::Communicator& tp, Tensor& y) {
  if (tp.size() > 1) tp.all_reduce(y, parallel::ReduceOp::Sum);
}

void gather_from_sequence_forward(parallel::Communicator& tp, const Tensor& slice, Tensor& full) {
  tp.all_gather(slice, full);
}

void gather_from_sequence_backward(parallel::Communicator& tp, const Tensor& d_full,
                                   Tensor& d_slice) {
  tp.reduce_scatter(d_full, d_slice, parallel::ReduceOp::Sum);
}

Tensor gathered_sequence(parallel::Communicator& tp, const Tensor& slice) {
  Tensor full =
      Tensor::empty(full_sequence_shape(slice.shape(), tp), slice.dtype(), slice.device());
  gather_from_sequence_forward(tp, slice, full);
  return full;
}

void reduce_scatter_to_sequence_forward(parallel::Communicator& tp, const Tensor& full_partial,
                                        Tensor& slice) {
  tp.reduce_scatter(full_partial, slice, parallel::ReduceOp::Sum);
}

void reduce_scatter_to_sequence_backward(parallel::Communicator& tp, const Tensor& d_slice,
                                         Tensor& d_full) {
  tp.all_gather(d_slice, d_full);
}

}  // namespace megatron::tensor_parallel
