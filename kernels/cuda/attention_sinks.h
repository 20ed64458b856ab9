#pragma once
// Attention sinks on CUDA, op for op kernels/cpu/attention_sinks.h (the arithmetic is there): the
// flash output scaled by r = sigmoid(lse - sigma_h) in place, and its backward (dout_scaled =
// r dout, may alias dout; dsinks[h] += -sum over (b, s) of (1 - r) dout . out). out, dout and
// dout_scaled [S, B, H, Dh] of storage type T; lse [B, H, S], sinks and dsinks [H] in fp32; the
// math in fp32 with the dot products summed in double. The backward runs one block per head
// over all its rows in a fixed order: the same bits every run, no atomics.
#include <cuda_runtime.h>

#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cuda {

template <typename T>
void attention_sinks_forward(const AttentionShape& shape, const float* sinks, const float* lse,
                             T* out, cudaStream_t stream);
// dsinks may be null (fixed sinks: off-by-one).
template <typename T>
void attention_sinks_backward(const AttentionShape& shape, const float* sinks, const float* lse,
                              const T* out, const T* dout, T* dout_scaled, float* dsinks,
                              cudaStream_t stream);

}  // namespace megatron::kernels::cuda
