#pragma once
// Optimizer kernels over flat fp32 arrays (master weights, main grads, Adam moments), mirroring
// kernels/cpu/optim.h with the shared math::adamw_update.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/common/numeric.h"

namespace megatron::kernels::cuda {

// One tensor (or contiguous chunk of a buffer) for the multi-tensor AdamW step.
struct AdamWTensor {
  float* param;          // fp32 master weights, updated in place
  const float* grad;     // fp32 main grads
  float* m;              // first moment
  float* v;              // second moment
  int64_t n;             // elements
  float wd_mult = 1.0f;  // weight decay used: p.weight_decay * wd_mult (0 for biases/norms)
  // Optional: also write the updated weights rounded to bf16 (the model's compute copy).
  __nv_bfloat16* param_bf16 = nullptr;
};

// For every tensor: grad' = grad * grad_scale, then math::adamw_update elementwise (grad_scale
// 1 gives exactly the CPU adamw_step). All tensors in as few launches as the kernel-argument
// table allows (24 tensors / 320 chunks of 64 Ki elements per launch).
void multi_tensor_adamw(const std::vector<AdamWTensor>& tensors, const math::AdamWParams& p,
                        float grad_scale, cudaStream_t stream);
// Single-tensor convenience with the CPU signature.
void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const math::AdamWParams& p, cudaStream_t stream);

// Sum of squares of all elements of several tensors, accumulated in double, written to
// *out_device (one double in device memory). Deterministic: fixed partial-sum layout (256
// blocks per tensor) and a fixed-order final reduction, independent of the GPU model.
size_t sum_squares_workspace_bytes(int num_tensors);
template <typename T>
void multi_tensor_sum_squares(const std::vector<const T*>& tensors,
                              const std::vector<int64_t>& sizes, double* out_device,
                              void* workspace, cudaStream_t stream);
template <typename T>
void sum_squares(const T* x, int64_t n, double* out_device, void* workspace, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
