#pragma once
// Fused (flash) attention: the interface of the memory-efficient path, NOT IMPLEMENTED yet.
//
// Intended contract (same qkv/out layouts, masks and scale as attention.h; forward saves the
// per-row log-sum-exp lse [B, H, S] (fp32) instead of the [B, H, S, S] probabilities, backward
// recomputes them):
//   flash_attention_forward(shape, opt, qkv, out, lse, workspace, stream)
//   flash_attention_backward(shape, opt, qkv, out, lse, dout, dqkv, workspace, stream)
// for T in {__nv_bfloat16, __half}, Dh <= 128 (Ampere) / <= 256 (Hopper), causal or not.
//
// Why it is missing (see flash_attention_support()): this machine's cuDNN is 9.19 without the
// cudnn_frontend headers. In cuDNN 9.19's backend API
//  - the unified CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR ops (9.13.1+) cannot express a
//    causal mask: that needs CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH, new in cuDNN 9.21;
//  - the composite flash-attention graph (matmul, pointwise scale, GEN_INDEX/CMP_GE/
//    BINARY_SELECT causal mask, reduction-based softmax with a stats output, matmul; and its
//    ~30-node backward) must match cuDNN's fusion pattern exactly and could not be validated
//    without a GPU, so it was not written.
// Two semantic limits any cuDNN path will have: dropout masks come from cuDNN's own RNG (they
// cannot follow the Philox index rule of attention.h, so fused dropout would not match the CPU),
// and padding is by per-sequence lengths (a key_mask that is not a suffix of zeros cannot be
// expressed). Until then use the unfused path (attention.h), which has the full semantics.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cpu/attention.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cuda {

struct FlashAttentionSupport {
  bool supported = false;
  std::string reason;  // why not, naming the missing piece
};

// Whether the fused path can run this problem on the current device. Today: never, with the
// reason above (and the cuDNN version found at run time).
FlashAttentionSupport flash_attention_support(const cpu::AttentionShape& shape,
                                              const cpu::AttentionOptions& opt, DType dtype);

// Throw megatron::Error with flash_attention_support()'s reason.
template <typename T>
void flash_attention_forward(const cpu::AttentionShape& shape, const cpu::AttentionOptions& opt,
                             const T* qkv, T* out, float* lse, void* workspace,
                             cudaStream_t stream);
template <typename T>
void flash_attention_backward(const cpu::AttentionShape& shape, const cpu::AttentionOptions& opt,
                              const T* qkv, const T* out, const float* lse, const T* dout, T* dqkv,
                              void* workspace, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
