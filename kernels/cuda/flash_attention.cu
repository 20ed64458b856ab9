#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/flash_attention.h"
#include "kernels/cuda/flash_attention_tc.h"
#include "kernels/cuda/flash_block.h"

namespace megatron::kernels::cuda {
namespace {

void check(const AttentionShape& s, const AttentionOptions& opt, DType dtype, const char* op) {
  const FlashAttentionSupport sup = flash_attention_support(s, opt, dtype);
  MT_CHECK(sup.supported, op, ": ", sup.reason);
}

// The whole sequence as one block of itself (kernels/cuda/flash_block.h).
AttentionBlock whole(const AttentionShape& s) { return AttentionBlock{0, s.S, 0, s.S, false}; }

template <typename T>
bool on_tensor_cores(const AttentionShape& s, const AttentionOptions& opt) {
  if constexpr (std::is_same_v<T, float>) return false;
  return flash_tc::runs(s, opt, detail::dtype_of<T>());
}

}  // namespace

FlashAttentionSupport flash_attention_support(const AttentionShape& s, const AttentionOptions& opt,
                                              DType dtype) {
  FlashAttentionSupport r;
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    r.reason = concat("flash attention: dtype ", dtype_name(dtype), " (needs f32, bf16 or f16)");
  } else if (s.Dh < 1 || s.Dh > kFlashMaxHeadDim) {
    r.reason = concat("flash attention: head dim ", s.Dh, " outside [1, ", kFlashMaxHeadDim, "]");
  } else if (s.S < 0 || s.B < 0 || s.G <= 0 || s.H % s.G != 0) {
    r.reason = concat("flash attention: bad shape S=", s.S, " B=", s.B, " H=", s.H, " G=", s.G);
  } else if (!(opt.dropout_p >= 0.0f && opt.dropout_p < 1.0f)) {
    r.reason = concat("flash attention: dropout_p ", opt.dropout_p, " outside [0, 1)");
  } else {
    r.supported = true;
  }
  return r;
}

size_t flash_attention_forward_workspace_bytes(const AttentionShape&) { return 0; }
size_t flash_attention_backward_workspace_bytes(const AttentionShape& s) {
  return flash_block_backward_workspace_bytes(s, whole(s));  // D, either path
}

template <typename T>
void flash_attention_forward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv,
                             T* out, float* lse, void*, cudaStream_t stream) {
  check(s, opt, detail::dtype_of<T>(), "flash_attention_forward");
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  if (on_tensor_cores<T>(s, opt))
    flash_tc::forward(s, opt, qkv, out, lse, stream);
  else
    flash_block_forward(s, opt, whole(s), qkv, qkv, out, lse, stream);
}

template <typename T>
void flash_attention_backward(const AttentionShape& s, const AttentionOptions& opt, const T* qkv,
                              const T* out, const float* lse, const T* dout, T* dqkv,
                              void* workspace, cudaStream_t stream) {
  check(s, opt, detail::dtype_of<T>(), "flash_attention_backward");
  if (s.S == 0 || s.B == 0 || s.H == 0) return;
  MT_CHECK(workspace != nullptr, "flash_attention_backward (CUDA): no workspace (need ",
           flash_attention_backward_workspace_bytes(s), " bytes)");
  if (on_tensor_cores<T>(s, opt)) {
    float* D = static_cast<float*>(workspace);
    flash_row_dots(s, s.S, out, dout, D, stream);
    flash_tc::backward(s, opt, qkv, lse, dout, D, dqkv, stream);
    return;
  }
  // The block kernels add into the gradients.
  MT_CUDA_CHECK(
      cudaMemsetAsync(dqkv, 0, size_t(s.S * s.B * (s.H + 2 * s.G) * s.Dh) * sizeof(T), stream));
  flash_block_backward(s, opt, whole(s), qkv, qkv, out, lse, dout, dqkv, dqkv, workspace, stream);
}

#define MT_INSTANTIATE(T)                                                                          \
  template void flash_attention_forward<T>(const kernels::AttentionShape&,                         \
                                           const kernels::AttentionOptions&, const T*, T*, float*, \
                                           void*, cudaStream_t);                                   \
  template void flash_attention_backward<T>(const kernels::AttentionShape&,                        \
                                            const kernels::AttentionOptions&, const T*, const T*,  \
                                            const float*, const T*, T*, void*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
