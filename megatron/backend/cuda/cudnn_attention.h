#pragma once
// Fused attention on cuDNN's scaled-dot-product-attention graphs (the cuDNN frontend's SDPA node,
// FlashAttention-2/3 class kernels on tensor cores): what model.attention_backend `fused` runs,
// and `auto` on CUDA wherever cuDNN supports the problem. Same buffers as our own flash kernels
// (kernels/cuda/flash_attention.h): qkv [S, B, G, (H/G + 2), Dh] read in place through strides,
// out [S, B, H, Dh], lse [B, H, S] (fp32 natural-log log-sum-exp, cuDNN's "Stats"); the
// backward writes every element of dqkv. With grouped queries (H/G > 1) the query heads are
// not an affine stride of qkv: they are copied out (and dQ back) with one 2-D copy each.
//
// Supported: bf16/fp16, Dh a multiple of 8 up to 128, causal or bidirectional, sliding windows,
// GQA/MQA, no dropout, no key mask, no packed-document segments (cuDNN draws dropout from its own
// RNG, so masks could not follow our Philox rule; holes in a key mask are not expressible as
// cuDNN's per-sequence lengths). Anything else runs our own kernels (auto) or is refused (fused).
// Whether cuDNN itself has an engine is asked once per shape (graphs are built and cached per
// device; the first call of a shape pays the build).
//
// Built only when the cuDNN frontend's headers were found (tools/fetch_cudnn_frontend.py);
// otherwise every problem reports unsupported, with that reason.
#include <cuda_runtime.h>

#include <string>

#include "kernels/common/attention_shape.h"
#include "megatron/core/dtype.h"

namespace megatron::cuda {

struct CudnnAttentionSupport {
  bool supported = false;
  std::string reason;  // why not
};

// Whether cuDNN runs this problem forward and backward (builds and caches its graphs).
CudnnAttentionSupport cudnn_attention_support(const kernels::AttentionShape& shape,
                                              const kernels::AttentionOptions& opt, DType dtype);

// The cuDNN library's version at run time (e.g. 91900), 0 when the frontend is not built in.
int cudnn_attention_runtime_version();

// Both throw megatron::Error when unsupported (ask cudnn_attention_support first).
void cudnn_attention_forward(const kernels::AttentionShape& shape,
                             const kernels::AttentionOptions& opt, DType dtype, const void* qkv,
                             void* out, float* lse, cudaStream_t stream);
void cudnn_attention_backward(const kernels::AttentionShape& shape,
                              const kernels::AttentionOptions& opt, DType dtype, const void* qkv,
                              const void* out, const float* lse, const void* dout, void* dqkv,
                              cudaStream_t stream);

}  // namespace megatron::cuda
