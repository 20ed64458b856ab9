#pragma once
// Row-major GEMM through cuBLASLt, the CUDA counterpart of kernels/cpu/gemm.h:
//   C[M,N] = epilogue(alpha * op(A) @ op(B) + beta * C)
// op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored [N,K] when trans_b);
// lda/ldb/ldc are row strides of the stored matrices. (Internally the row-major problem is the
// column-major C^T = op(B)^T op(A)^T, so no data moves.)
//
// Types: A and B share one type (F32, BF16 or F16); C is that type or F32 (e.g. bf16 inputs
// accumulated into fp32 main grads with beta = 1). Compute and alpha/beta are always fp32
// (CUBLAS_COMPUTE_32F); fp32 inputs may opt into TF32 tensor cores with allow_tf32.
//
// Epilogues (cuBLASLt's, applied to the fp32 result before the store; bias and aux have C's type):
//   Bias          C += bias[N] per row (as the CPU gemm's bias)
//   Gelu          C = gelu(C)   (cuBLASLt's tanh-approximation GELU; it is not bit-identical to
//                 math::gelu_tanh: expect ~1e-3 relative differences)
//   BiasGelu      C = gelu(C + bias)
//   GeluAux       C = gelu(X), and aux[M,N] (row stride ld_aux) = X, the pre-activation, for
//   BiasGeluAux   the backward pass (X includes the bias). ld_aux % 8 == 0.
//   DGelu         C = (alpha op(A) op(B)) * gelu'(aux): backward through the GELU, with aux the
//                 saved pre-activation.
//   DGeluBgrad    as DGelu, and bias[N] = column sums of the new C (the bias gradient; WRITTEN,
//                 not accumulated).
//   BgradA        bias[M] = row sums of op(A) (sum over K), e.g. dbias from dY in the weight-grad
//                 GEMM dW = dY^T X (WRITTEN, not accumulated).
// When the cuBLASLt heuristic offers no algorithm (unusual leading dimensions or alignments),
// epilogues None and Bias fall back to classic cuBLAS (cublasGemmStridedBatchedEx_64, then a bias
// kernel); for the other epilogues that is an error naming the problem (use no epilogue plus the
// element-wise kernels).
//
// Strided batched: batch > 1 repeats the problem with A, B, C (and aux) advanced by stride_a,
// stride_b, stride_c (elements) per batch entry.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "megatron/core/dtype.h"

namespace megatron::cuda {
class CachingAllocator;
}

namespace megatron::kernels::cuda {

enum class GemmEpilogue {
  None,
  Bias,
  Gelu,
  BiasGelu,
  GeluAux,
  BiasGeluAux,
  DGelu,
  DGeluBgrad,
  BgradA
};

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  void* C = nullptr;
  int64_t ldc = 0;
  DType ab_type = DType::F32;
  DType c_type = DType::F32;
  GemmEpilogue epilogue = GemmEpilogue::None;
  const void* bias = nullptr;  // Bias*: input; DGeluBgrad/BgradA: output (cast away const)
  void* aux = nullptr;         // GeluAux/BiasGeluAux: output; DGelu*: input
  int64_t ld_aux = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_aux = 0;
  bool allow_tf32 = false;
};

// Owns a cuBLASLt handle, a workspace per stream (from the caching allocator) and a cache of
// the algorithms chosen by the heuristic per problem (shape, types, transposes, epilogue and
// pointer alignments). Thread-safe; use one per device.
class GemmContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;  // what Hopper kernels like
  explicit GemmContext(megatron::cuda::CachingAllocator& allocator,
                       size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmContext();
  GemmContext(const GemmContext&) = delete;
  GemmContext& operator=(const GemmContext&) = delete;

  void run(const GemmArgs& args, cudaStream_t stream);
  size_t cached_algorithms() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The CPU gemm's signature (plus context and stream) for storage type T in {float, bf16, f16}.
template <typename T>
void gemm(GemmContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C,
          int64_t ldc, const T* bias, cudaStream_t stream);

// dbias[N] += sum over rows of dout[M,N] (fp32 result), deterministic two-pass column sums
// through a workspace of bias_grad_workspace_bytes(M, N) bytes.
size_t bias_grad_workspace_bytes(int64_t M, int64_t N);
template <typename T>
void bias_grad(const T* dout, int64_t M, int64_t N, float* dbias, void* workspace,
               cudaStream_t stream);

}  // namespace megatron::kernels::cuda
