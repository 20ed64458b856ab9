#include <cudnn.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"

namespace megatron::kernels::cuda {

FlashAttentionSupport flash_attention_support(const cpu::AttentionShape& shape,
                                              const cpu::AttentionOptions& opt, DType dtype) {
  (void)shape;
  (void)opt;
  FlashAttentionSupport s;
  s.supported = false;
  s.reason =
      concat("fused attention is not implemented (", dtype_name(dtype),
             "): it needs a cuDNN SDPA graph "
             "with a causal mask, i.e. cuDNN >= 9.21 (unified SDPA op with a mask subgraph) or the "
             "cudnn_frontend composite graph; this build has cuDNN ",
             CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL, " (runtime ", cudnnGetVersion(),
             ") and no cudnn_frontend. Use the unfused attention (kernels/cuda/attention.h)");
  return s;
}

template <typename T>
void flash_attention_forward(const cpu::AttentionShape& shape, const cpu::AttentionOptions& opt,
                             const T*, T*, float*, void*, cudaStream_t) {
  const FlashAttentionSupport s = flash_attention_support(shape, opt, detail::dtype_of<T>());
  MT_CHECK(s.supported, s.reason);
}

template <typename T>
void flash_attention_backward(const cpu::AttentionShape& shape, const cpu::AttentionOptions& opt,
                              const T*, const T*, const float*, const T*, T*, void*, cudaStream_t) {
  const FlashAttentionSupport s = flash_attention_support(shape, opt, detail::dtype_of<T>());
  MT_CHECK(s.supported, s.reason);
}

#define MT_INSTANTIATE(T)                                                                      \
  template void flash_attention_forward<T>(const cpu::AttentionShape&,                         \
                                           const cpu::AttentionOptions&, const T*, T*, float*, \
                                           void*, cudaStream_t);                               \
  template void flash_attention_backward<T>(const cpu::AttentionShape&,                        \
                                            const cpu::AttentionOptions&, const T*, const T*,  \
                                            const float*, const T*, T*, void*, cudaStream_t);
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
