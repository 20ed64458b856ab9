#pragma once
// Row-major GEMMs on the CPU through oneDNN, which picks its kernels from the CPU's feature bits
// at run time (AVX2, AVX-512, AVX-512 BF16, AMX). C[M,N] = alpha * op(A) @ op(B) + beta * C
// (+ bias[N] per row). op(A) is [M,K] (A stored [K,M] when trans_a), op(B) is [K,N] (B stored
// [N,K] when trans_b). lda/ldb/ldc are row strides of the stored matrices. bias may be null.
#include <cstdint>
#include <string>

#include "megatron/core/dtype.h"

namespace megatron::kernels::cpu {

// fp32. Safe to call inside an OpenMP parallel region (then it runs on the calling thread).
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          const float* bias = nullptr);

// bf16 A and B, fp32 accumulation; C is fp32 or bf16 (c_dtype), rounded to nearest even once;
// accumulate: C += A@B (else C = A@B); bias (fp32 or bf16, bias_dtype) is added before rounding.
struct Bf16Gemm {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  const bf16_t* A = nullptr;
  int64_t lda = 0;
  const bf16_t* B = nullptr;
  int64_t ldb = 0;
  void* C = nullptr;
  DType c_dtype = DType::F32;
  int64_t ldc = 0;
  bool accumulate = false;
  const void* bias = nullptr;
  DType bias_dtype = DType::F32;
};
void gemm_bf16(const Bf16Gemm& g);

// True when this CPU has bf16 instructions (AVX-512 BF16 or AMX) and oneDNN has an optimised
// (not reference) bf16 kernel for them: then bf16 GEMMs run natively instead of widening to fp32.
bool native_bf16_gemm();

// What runs the GEMMs, e.g. "oneDNN 2.6.3, cpu isa avx512_core_amx: fp32 brg:avx512_core,
// bf16 brg:avx512_core_amx_bf16 (native)".
std::string gemm_path();

// The implementation oneDNN chooses for a [M,K]x[K,N] matmul of this dtype (F32 or BF16), e.g.
// "brg:avx512_core", "ref:any", or "unimplemented"; what gemm_path() and the tests report.
std::string matmul_impl(DType dtype, int64_t M, int64_t N, int64_t K);

// oneDNN's highest usable instruction set, e.g. "avx512_core_amx".
std::string onednn_isa();

// Rows per block when a 16-bit linear layer without native 16-bit GEMMs (fp16; bf16 on a CPU
// without bf16 instructions) widens to fp32 GEMMs a block of rows at a time
// (backend/linear_cpu.cpp): blocks of about 4 MiB of fp32 inputs and outputs, so the widened
// copies stay in cache, but at least 1024 rows, so the GEMMs keep their speed (oneDNN's AVX2
// sgemm reaches 236 GFLOP/s at 1024 rows and 161 at 256 on a 1024^2 weight, 2 threads; GPT-2
// 124M bf16 without bf16 instructions ran at 239 tokens/s with 256-row blocks, 260 with 1024,
// 262 unblocked). The planner sizes that workspace with it.
int64_t widened_gemm_block_rows(int64_t rows, int64_t in, int64_t out);

// dbias[N] += sum over rows of dout[M,N] (dout fp32 or bf16).
void bias_grad(const float* dout, int64_t M, int64_t N, float* dbias);
void bias_grad(const bf16_t* dout, int64_t M, int64_t N, float* dbias);

}  // namespace megatron::kernels::cpu
