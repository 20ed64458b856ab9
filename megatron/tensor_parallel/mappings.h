#pragma once
// The boundaries of tensor-parallel regions (Megatron's tensor_parallel/mappings), each as a
// forward/backward pair over sequence-major activations [S, B, ...]. A column-parallel layer
// enters a region, a row-parallel layer (or the vocab-parallel embedding) leaves it:
//
//   pair                       forward                      backward
//   copy_to_region             identity                     all-reduce of dx
//   reduce_from_region         all-reduce of y              identity
//   gather_from_sequence       all-gather [S/tp] -> [S]     reduce-scatter [S] -> [S/tp]
//   reduce_scatter_to_sequence reduce-scatter [S] -> [S/tp] all-gather [S/tp] -> [S]
//
// Without sequence parallelism a region is entered by copy and left by reduce; with it
// (Megatron's sequence parallelism) entered by gather and left by reduce-scatter, so activations
// outside regions are sequence slices. Every function is a no-op on a group of one.
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron::tensor_parallel {

// [S_local, ...] -> [S_local * tp, ...]: the sequence dimension is the outermost.
Shape full_sequence_shape(const Shape& local, const parallel::Communicator& tp);

// Identity forward; the input gradient is summed over the group.
inline const Tensor& copy_to_region_forward(const Tensor& x) { return x; }
void copy_to_region_backward(parallel::Communicator& tp, Tensor& dx);

// The partial outputs are summed over the group; the gradient passes unchanged.
void reduce_from_region_forward(parallel::Communicator& tp, Tensor& y);
inline const Tensor& reduce_from_region_backward(const Tensor& dy) { return dy; }

// slice [S/tp, ...] -> full [S, ...] (all-gather), and the full gradient back to this rank's
// slice summed over the group (reduce-scatter).
void gather_from_sequence_forward(parallel::Communicator& tp, const Tensor& slice, Tensor& full);
void gather_from_sequence_backward(parallel::Communicator& tp, const Tensor& d_full,
                                   Tensor& d_slice);
// A newly allocated full-sequence tensor gathered from `slice` (transient buffers).
Tensor gathered_sequence(parallel::Communicator& tp, const Tensor& slice);

// full partial sums [S, ...] -> this rank's summed slice [S/tp, ...] (reduce-scatter), and the
// slice gradient back to the full sequence (all-gather).
void reduce_scatter_to_sequence_forward(parallel::Communicator& tp, const Tensor& full_partial,
                                        Tensor& slice);
void reduce_scatter_to_sequence_backward(parallel::Communicator& tp, const Tensor& d_slice,
                                         Tensor& d_full);

}  // namespace megatron::tensor_parallel
