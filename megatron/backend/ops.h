#pragma once
// Device-dispatched ops over Tensors. Layers call these; each checks shapes and dtypes at the
// boundary, then runs the kernel for the tensor's device (kernels/cpu today; kernels/cuda when
// the CUDA backend provides it, otherwise a clear error).
#include <cstdint>

#include "kernels/common/numeric.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "megatron/core/tensor.h"

namespace megatron::ops {

// y[N,out] = x[N,in] @ w[out,in]^T (+ b[out])
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
// dx = dy @ w (written; skipped when dx is null); dw += dy^T @ x; db += colsum(dy) (if db).
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db);

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw);

void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
void swiglu_forward(const Tensor& x, Tensor& y);  // x [N, 2F] -> y [N, F]
void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

// ids int32 [n]; table [vocab_rows, D] holding rows from vocab_start; out [n, D]
void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start, Tensor& dtable);

void attention_forward(const kernels::cpu::AttentionShape& shape,
                       const kernels::cpu::AttentionOptions& opt, const Tensor& qkv, Tensor& out,
                       Tensor& probs);
void attention_backward(const kernels::cpu::AttentionShape& shape,
                        const kernels::cpu::AttentionOptions& opt, const Tensor& qkv,
                        const Tensor& probs, const Tensor& dout, Tensor& dqkv);
void rope_forward(const kernels::cpu::AttentionShape& shape, Tensor& qkv, float theta,
                  int64_t position_offset);
void rope_backward(const kernels::cpu::AttentionShape& shape, Tensor& dqkv, float theta,
                   int64_t position_offset);

// Inverted dropout (kernels/cpu/dropout.h): element i uses Philox(seed, stream) at
// index_offset + i; backward regenerates the same mask.
void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset);

// logits [N, V_local]; targets int32 [N]; loss [N]; lse [N]
void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                           const kernels::cpu::VocabSlice& vs, int32_t ignore_index, Tensor& loss,
                           Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                            const kernels::cpu::VocabSlice& vs, int32_t ignore_index,
                            const Tensor& lse, const Tensor& dloss, Tensor& dlogits);

void add(const Tensor& a, const Tensor& b, Tensor& out);
// y[r, :] += bias for every row of y
void add_bias(Tensor& y, const Tensor& bias);
void add_inplace(Tensor& acc, const Tensor& x);
void scale_inplace(Tensor& x, float s);

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p);
double sum_squares(const Tensor& x);

}  // namespace megatron::ops
