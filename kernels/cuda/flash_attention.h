#pragma once
// Fused (flash, FlashAttention-2 style) attention on CUDA: our own tiled kernels with exactly the
// semantics of the CPU attention (kernels/cpu/attention.h, kernels/cpu/flash_attention.h).
//
// qkv is the fused grouped projection [S, B, G, (H/G + 2), Dh] read in place; out [S, B, H, Dh];
// AttentionShape incl. head_offset/total_heads/batch_offset; causal or bidirectional; an
// arbitrary key_mask [B, S] (device memory; holes allowed, a fully masked row gives zeros);
// segment_ids [B, S] (device memory; packed documents never attend across each other);
// GQA/MQA; scale; dropout with the Philox index rule of attention.h, so the dropout masks are bit
// for bit those of the CPU and of the unfused CUDA path. Forward saves only the per-row
// log-sum-exp lse [B, H, S] (fp32, -inf for an empty row) instead of the [B, H, S, S]
// probabilities; backward recomputes them tile by tile. T in {float, bf16, fp16}, fp32
// accumulation, Dh <= 256.
//
// Beside cuDNN's fused attention (megatron/backend/cuda/cudnn_attention.h, which `auto` runs
// wherever it can and which is ~8x faster on an H200): cuDNN draws dropout from its own RNG (masks
// could not follow our Philox rule and match the CPU), pads by per-sequence lengths (a key_mask
// with holes is not expressible) and takes no fp32; these kernels keep the full semantics, stay
// testable against the CPU, and run whatever cuDNN is not handed.
//
// Soft-capped scores (AttentionOptions::softcap, Gemma 2) too. Two implementations: the
// tensor-core kernels (flash_attention_tc.h: bf16/fp16, Dh a multiple of 16, no dropout) and
// otherwise the SIMT kernels of flash_block.h with the whole sequence as one block (one warp per
// query or key row, 32-row tiles in shared memory, deterministic dK/dV per key, no atomics).
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/attention_shape.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cuda {

struct FlashAttentionSupport {
  bool supported = false;
  std::string reason;  // why not
};

inline constexpr int64_t kFlashMaxHeadDim = 256;

// Whether the fused path runs this problem: Dh in [1, 256], any dtype of F32/BF16/F16.
FlashAttentionSupport flash_attention_support(const kernels::AttentionShape& shape,
                                              const kernels::AttentionOptions& opt, DType dtype);

size_t flash_attention_forward_workspace_bytes(const kernels::AttentionShape& shape);
size_t flash_attention_backward_workspace_bytes(const kernels::AttentionShape& shape);

// out [S, B, H, Dh] (T), lse [B, H, S] (fp32). Throws megatron::Error when unsupported.
template <typename T>
void flash_attention_forward(const kernels::AttentionShape& shape,
                             const kernels::AttentionOptions& opt, const T* qkv, T* out, float* lse,
                             void* workspace, cudaStream_t stream);
// Writes every element of dqkv.
template <typename T>
void flash_attention_backward(const kernels::AttentionShape& shape,
                              const kernels::AttentionOptions& opt, const T* qkv, const T* out,
                              const float* lse, const T* dout, T* dqkv, void* workspace,
                              cudaStream_t stream);

}  // namespace megatron::kernels::cuda
