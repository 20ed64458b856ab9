#pragma once
// Rotary position embedding, op for op kernels/cpu/rope.h (Hugging Face "rotate half"): rotates
// the query and key heads of a fused qkv buffer [S, B, G, (H/G + 2), Dh] in place, at positions
// position_offset + s, or positions[s * B + b] (device memory, [S, B] int32) when given; backward rotates by the inverse angle. The inverse frequencies are
// computed on the host with math::rope_inv_freq (the CPU kernel's exact values) so the angles
// match the CPU bit for bit; only sin/cos may differ by an ulp. Dh must be even and <= 1024.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/attention_shape.h"
#include "kernels/common/numeric.h"

namespace megatron::kernels::cuda {

template <typename T>
void rope_forward(const AttentionShape& shape, T* qkv, const math::RopeFrequencies& rope,
                  int64_t position_offset, const int32_t* positions, cudaStream_t stream);
template <typename T>
void rope_backward(const AttentionShape& shape, T* dqkv, const math::RopeFrequencies& rope,
                   int64_t position_offset, const int32_t* positions, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
