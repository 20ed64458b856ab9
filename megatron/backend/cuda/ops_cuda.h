#pragma once
// The CUDA versions of the ops in megatron/backend/ops.h, which calls them for tensors on
// Device::CUDA after its device and shape checks (call ops:: rather than these). Each checks
// dtypes, picks the kernels/cuda instantiation with one runtime -> template switch and queues
// it on the current stream (runtime.h); workspaces come from the caching allocator on that
// stream. CUDA-free header.
//
// Dtypes (T: fp32, bf16 or fp16, one per call; "+=" marks accumulated fp32 gradients):
//   linear_forward          x, w, b, y: T (fp32 GEMMs run in full fp32, no TF32)
//   linear_backward         x, w, dy, dx: T; dw: T or fp32 (+=); db: fp32 (+=)
//   layernorm/rmsnorm fwd   x, y: T; w, b: T or fp32; mean, rstd: fp32
//   layernorm/rmsnorm bwd   x, dy, dx: T; w: T or fp32; mean, rstd: fp32; dw, db: fp32 (+=)
//   gelu, swiglu, tanh      T
//   embedding_forward       ids: int32; table, out: T
//   embedding_backward      ids: int32; dout: T; dtable: fp32 (+=)
//   attention_forward       qkv, out: T; probs: fp32; opt.key_mask: device memory (unfused
//                           cuBLASLt path, kernels/cuda/attention.h)
//   attention_backward      qkv, dout, dqkv: T; probs: fp32
//   flash_attention_*       qkv, out, dout, dqkv: T; lse: fp32 (own tiled kernels,
//                           kernels/cuda/flash_attention.h)
//   kv_cache_attention      qkv, keys, values, out: T (fp32 math; kernels/cuda/kv_attention.h)
//   rope, dropout           T
//   cross_entropy_forward   logits: T; targets: int32; loss, lse: fp32
//   cross_entropy_backward  logits, dlogits: T; targets: int32; lse, dloss: fp32
//   cross_entropy pieces    logits: T; targets: int32; row_max, sum_exp, target_logit, loss,
//                           lse: fp32
//   gather/scatter_rows     src, out: any one dtype; index: int32 (out of range counts as -1)
//   moe_combine             rows: T; index: int32; gates: fp32; out: T or fp32
//   moe_combine_backward    rows, dy, d_rows: T; gates, d_gates: fp32
//   add, add_bias, scale    T
//   add_inplace             acc and x: T, or acc fp32 with x bf16/fp16
//   cast                    src, dst: any of fp32, bf16, fp16
//   adamw_step              fp32
//   sum_squares             T (double accumulation; blocks the host until the result is read)
// Differences from the CPU kernels (a kernel cannot throw): negative embedding ids and
// out-of-vocabulary cross-entropy targets are treated as belonging to another vocabulary shard
// instead of raising an error (kernels/cuda/embedding.h, cross_entropy.h); a row index of the
// MoE ops outside the rows counts as -1, and a scatter naming a row twice is not detected
// (kernels/cuda/moe_rows.h).
#include <cstdint>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "kernels/common/dropout_rows.h"
#include "kernels/common/numeric.h"
#include "kernels/common/vocab_slice.h"
#include "megatron/core/tensor.h"

namespace megatron::ops::cuda_backend {

void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                     Tensor* db);

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw);

void gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind);
void tanh_forward(const Tensor& x, Tensor& y);
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
int64_t count_outside(const Tensor& x, float limit);
void swiglu_forward(const Tensor& x, Tensor& y);
void swiglu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start, Tensor& dtable);

void attention_forward(const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs);
void attention_backward(const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv);
void flash_attention_forward(const kernels::AttentionShape& shape,
                             const kernels::AttentionOptions& opt, const Tensor& qkv, Tensor& out,
                             Tensor& lse);
void flash_attention_backward(const kernels::AttentionShape& shape,
                              const kernels::AttentionOptions& opt, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& dout,
                              Tensor& dqkv);
void kv_cache_attention(const kernels::AttentionShape& shape, float scale, const Tensor& qkv,
                        Tensor& keys, Tensor& values, int64_t past, Tensor& out, int64_t window);
void rope_forward(const kernels::AttentionShape& shape, Tensor& qkv,
                  const math::RopeFrequencies& rope, int64_t position_offset,
                  const Tensor* positions = nullptr);
void rope_backward(const kernels::AttentionShape& shape, Tensor& dqkv,
                   const math::RopeFrequencies& rope, int64_t position_offset,
                   const Tensor* positions = nullptr);

void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset);
void dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                  uint64_t seed, uint64_t stream);

void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, int32_t ignore_index, Tensor& loss,
                           Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                            const kernels::VocabSlice& vs, int32_t ignore_index, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits);
void cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs, Tensor& row_max);
void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, const Tensor& row_max, Tensor& sum_exp,
                           Tensor& target_logit);
void cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                        const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                        Tensor& lse);

// ops_cuda_moe.cpp
void gather_rows(const Tensor& src, const Tensor& index, Tensor& out);
void scatter_rows(const Tensor& src, const Tensor& index, Tensor& out);
void moe_combine(const Tensor& rows, const Tensor* index, const Tensor* gates, int64_t topk,
                 Tensor& out);
void moe_combine_backward(const Tensor& rows, const Tensor& gates, const Tensor& dy, int64_t topk,
                          Tensor& d_rows, Tensor& d_gates);

void add(const Tensor& a, const Tensor& b, Tensor& out);
void add_bias(Tensor& y, const Tensor& bias);
void add_inplace(Tensor& acc, const Tensor& x);
void scale_inplace(Tensor& x, float s);
void fill(Tensor& x, float v);
void cast(const Tensor& src, Tensor& dst);

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p);
double sum_squares(const Tensor& x);
double sum_squares_of(const std::vector<Tensor>& xs);  // same device and dtype, non-empty

}  // namespace megatron::ops::cuda_backend
