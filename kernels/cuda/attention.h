#pragma once
// Scaled dot-product attention over the fused QKV layout, the CUDA counterpart of
// kernels/cpu/attention.h with the same shapes, options and semantics:
//   qkv [S, B, G, (H/G + 2), Dh] (per group: its H/G query heads, its key head, its value head),
//   out [S, B, H, Dh], probs [B, H, S, S] (fp32, post-mask softmax, pre-dropout; saved for
//   backward), causal, key_mask [B, S] (device memory, 1 = attend) and segment_ids [B, S]
//   (device memory, packed documents) masks, fully masked rows
//   give zeros, dropout on the probabilities from Philox at index
//   (((batch_offset + b) * total_heads + head_offset + h) * S + i) * S + j:
//   the same masks as the CPU kernel, bit for bit.
//
// This is the unfused reference path: Q, K, V are first unpacked into per-head contiguous
// buffers ([B, G, H/G, S, Dh] = [B, H, S, Dh] for Q, [B, G, S, Dh] for K and V), so that each
// query group's heads stack into one [H/G * S, Dh] matrix; the products are then strided-
// batched cuBLASLt GEMMs over the B * G groups (fp32 accumulation; scores and probs in fp32)
// with the masked softmax + dropout in a kernel. GQA needs no K/V copies per head, and dK/dV sum
// over the group's heads inside the GEMM's K dimension. Memory: O(B * H * S^2); for long
// sequences use the fused path (flash_attention.h).
//
// T in {float, __nv_bfloat16, __half} is the storage type of qkv/out/dout/dqkv.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common/attention_shape.h"
#include "kernels/cuda/gemm.h"

namespace megatron::kernels::cuda {

// Workspace sizes in bytes for storage type T (element size `elem_bytes`).
size_t attention_forward_workspace_bytes(const AttentionShape& shape, size_t elem_bytes);
size_t attention_backward_workspace_bytes(const AttentionShape& shape, size_t elem_bytes);

// opt.key_mask, when set, points to device memory.
template <typename T>
void attention_forward(GemmContext& gemm, const AttentionShape& shape, const AttentionOptions& opt,
                       const T* qkv, T* out, float* probs, void* workspace, cudaStream_t stream);
// Writes dqkv (same layout as qkv) from dout [S, B, H, Dh].
template <typename T>
void attention_backward(GemmContext& gemm, const AttentionShape& shape, const AttentionOptions& opt,
                        const T* qkv, const float* probs, const T* dout, T* dqkv, void* workspace,
                        cudaStream_t stream);

// Layout helpers (also used by the fused path).
// qkv [S, B, G, H/G + 2, Dh] -> q [B, H, S, Dh], k [B, G, S, Dh], v [B, G, S, Dh]
template <typename T>
void attention_unpack_qkv(const AttentionShape& shape, const T* qkv, T* q, T* k, T* v,
                          cudaStream_t stream);
// The inverse (writes every element of qkv).
template <typename T>
void attention_pack_qkv(const AttentionShape& shape, const T* q, const T* k, const T* v, T* qkv,
                        cudaStream_t stream);
// x [S, B, H, Dh] <-> y [B, H, S, Dh]
template <typename T>
void attention_sbhd_to_bhsd(const AttentionShape& shape, const T* x, T* y, cudaStream_t stream);
template <typename T>
void attention_bhsd_to_sbhd(const AttentionShape& shape, const T* y, T* x, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
