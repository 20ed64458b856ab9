#pragma once
// The ops' front end, over Tensors. Layers call these; each checks that all its tensors are on
// one device (tensors on different devices are an error naming each one's device), checks
// shapes at the boundary, then hands the call to that device's backend object
// (backend::device_ops, device_backends.h; the interface is kernels/common/device_ops.h):
//  - cpu: CpuOps (cpu_ops.h), the kernels/cpu kernels with fp32 math;
//  - cuda (builds with -DMEGATRON_CUDA=ON; otherwise a clear error): CudaOps, kernels/cuda,
//    queued on the CUDA backend's current stream (backend/cuda/runtime.h), asynchronous for the
//    host except sum_squares, which returns a host value. Activations may be fp32, bf16 or
//    fp16; saved statistics, parameter gradients that accumulate (main grads) and losses stay
//    fp32. The dtypes each op accepts are listed in backend/cuda/ops_cuda.h.
#include <cstdint>
#include <vector>

#include "kernels/common/dropout_rows.h"
#include "kernels/common/numeric.h"
#include "kernels/common/qk_projection.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "megatron/core/tensor.h"

namespace megatron::ops {

// y[N,out] = x[N,in] @ w[out,in]^T (+ b[out])
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y);
// dx = dy @ w (written; skipped when dx is null); dw += dy^T @ x (skipped when dw is null: a
// frozen weight); db += colsum(dy) (if db).
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                     Tensor* db);
// linear_backward's weight-gradient half: dw += dy^T @ x (dw [out, in], or null when frozen),
// db += colsum(dy). The weight gives only its dtype and is not read: it may be unset (a weight
// that sharding released before a deferred W), else of out * in elements in any shape.
void linear_weight_grad(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dw,
                        Tensor* db);

void layernorm_forward(const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y,
                       Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db);
void rmsnorm_forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy,
                      Tensor& dx, Tensor& dw);
// Per-head RMSNorm of the query and key heads of a fused QKV activation (qk_layernorm): x and y
// [..., G, q_slots + 2, Dh] (q_slots query heads, the key head, the value head per group; the
// value heads copied), wq and wk [Dh], rstd F32 [rows / (q_slots + 2), q_slots + 1]. Backward
// writes dx (which may alias dy) and accumulates into dwq and dwk (F32).
void qk_rmsnorm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk, float eps,
                        int64_t q_slots, Tensor& y, Tensor& rstd);
void qk_rmsnorm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& rstd,
                         const Tensor& dy, int64_t q_slots, Tensor& dx, Tensor& dwq, Tensor& dwk);

// RMSNorm of the queries and keys over their whole projections (OLMo-2), in the three steps of
// kernels/cpu/norm.h so that tensor-parallel ranks can sum their partial statistics between
// them: x, y, dy, dx [p.tokens, p.groups, p.q_slots + 2, p.head_dim]; wq [p.local_q()], wk
// [p.local_k()]; sums, dots and rstd F32 [p.tokens, 2]. qk_projection_sums: sum x^2 (dy null)
// or sum dy w x (dy given) over each token's local query, then key, entries. Backward writes dx
// (which may alias dy) and accumulates into dwq and dwk (F32). CPU: fp32 weights; CUDA
// (kernels/cuda/qk_projection.h): fp32 or the activations' dtype.
void qk_projection_sums(const Tensor& x, const Tensor* dy, const Tensor& wq, const Tensor& wk,
                        const kernels::QkProjection& p, Tensor& sums);
void qk_projection_norm_forward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                const Tensor& sums, const kernels::QkProjection& p, Tensor& y,
                                Tensor& rstd);
void qk_projection_norm_backward(const Tensor& x, const Tensor& wq, const Tensor& wk,
                                 const Tensor& rstd, const Tensor& dots, const Tensor& dy,
                                 const kernels::QkProjection& p, Tensor& dx, Tensor& dwq,
                                 Tensor& dwk);

void gelu_forward(const Tensor& x, Tensor& y, math::Gelu kind = math::Gelu::Tanh);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx,
                   math::Gelu kind = math::Gelu::Tanh);
// y = tanh(x); backward from the output y: dx = dy * (1 - y^2) (dx may be dy).
void tanh_forward(const Tensor& x, Tensor& y);
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
// Gated linear unit: x [N, 2F] = [gate | up] -> y [N, F] = act(gate) * up (SwiGLU: SiLU;
// GeGLU: tanh GELU; quick GELU), with math::Glu's clamps and offset (GPT-OSS's).
void glu_forward(const Tensor& x, Tensor& y, math::Glu glu = {});
void glu_backward(const Tensor& x, const Tensor& dy, Tensor& dx, math::Glu glu = {});

// ids int32 [n]; table [vocab_rows, D] holding rows from vocab_start; out [n, D]
void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, int64_t vocab_start, Tensor& dtable);

void attention_forward(const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,
                       const Tensor& qkv, Tensor& out, Tensor& probs);
void attention_backward(const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,
                        const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv);
// Fused (flash) attention, same semantics as attention_forward/backward
// (kernels/cpu/flash_attention.h, kernels/cuda/flash_attention.h): forward saves lse [B, H, S]
// (F32) instead of the [B, H, S, S] probabilities; backward recomputes them from qkv and lse.
void flash_attention_forward(const kernels::AttentionShape& shape,
                             const kernels::AttentionOptions& opt, const Tensor& qkv, Tensor& out,
                             Tensor& lse);
void flash_attention_backward(const kernels::AttentionShape& shape,
                              const kernels::AttentionOptions& opt, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& dout,
                              Tensor& dqkv);
// Context parallelism (kernels/cpu/flash_attention.h): one block of the global attention,
// shape.S being the global sequence. q: fused qkv rows [q_rows, B, G, H/G + 2, Dh]; kv: the same
// layout or, block.kv_packed, [k_rows, B, G, 2, Dh]; out [q_rows, B, H, Dh]; lse [B, H, q_rows].
// Backward adds into dq (q's layout, query slots) and dkv (kv's layout) given the merged out and
// lse. Merge: acc_out [rows, B, H, Dh] and acc_lse [B, H, L] rows [acc_row, acc_row + rows) take
// in a block's out [rows, B, H, Dh] and lse [B, H, rows]. CPU: fp32; CUDA
// (kernels/cuda/flash_block.h): the block ops in fp32, bf16 or fp16, the merge in fp32.
void flash_attention_block_forward(const kernels::AttentionShape& shape,
                                   const kernels::AttentionOptions& opt,
                                   const kernels::AttentionBlock& block, const Tensor& q,
                                   const Tensor& kv, Tensor& out, Tensor& lse);
void flash_attention_block_backward(const kernels::AttentionShape& shape,
                                    const kernels::AttentionOptions& opt,
                                    const kernels::AttentionBlock& block, const Tensor& q,
                                    const Tensor& kv, const Tensor& out, const Tensor& lse,
                                    const Tensor& dout, Tensor& dq, Tensor& dkv);
void flash_attention_merge(const Tensor& out, const Tensor& lse, Tensor& acc_out, Tensor& acc_lse,
                           int64_t acc_row);
void rope_forward(const kernels::AttentionShape& shape, Tensor& qkv,
                  const math::RopeFrequencies& rope, int64_t position_offset,
                  const Tensor* positions = nullptr);
void rope_backward(const kernels::AttentionShape& shape, Tensor& dqkv,
                   const math::RopeFrequencies& rope, int64_t position_offset,
                   const Tensor* positions = nullptr);
// Incremental decoding (kernels/cpu/kv_attention.h, kernels/cuda/kv_attention.h): appends the
// new keys/values of qkv [S, B, G, H/G + 2, Dh] at position `past` of the caches
// [B, G, capacity, Dh] and attends each new query causally over the cache (the last `window`
// positions with a sliding window > 0). CPU: fp32 only (InputError otherwise); CUDA: fp32,
// bf16 or fp16 (one dtype for all four tensors, fp32 math, Dh <= 256). softcap > 0: scores
// soft-capped as AttentionOptions::softcap. sinks: F32 [H] attention sinks' logits, or null.
void kv_cache_attention(const kernels::AttentionShape& shape, float scale, const Tensor& qkv,
                        Tensor& keys, Tensor& values, int64_t past, Tensor& out, int64_t window = 0,
                        float softcap = 0.0f, const Tensor* sinks = nullptr);
// Attention sinks around the flash kernels (kernels/cpu/attention_sinks.h): sinks F32 [H], lse
// F32 [B, H, S] (the flash forward's), out [S, B, H * Dh] scaled in place; backward writes
// dout_scaled (may be dout) and adds into dsinks F32 [H] (null: fixed sinks). out, dout and
// dout_scaled in the activations' dtype (kernels/cuda/attention_sinks.h on CUDA).
void attention_sinks_forward(const kernels::AttentionShape& shape, const Tensor& sinks,
                             const Tensor& lse, Tensor& out);
void attention_sinks_backward(const kernels::AttentionShape& shape, const Tensor& sinks,
                              const Tensor& lse, const Tensor& out, const Tensor& dout,
                              Tensor& dout_scaled, Tensor* dsinks);

// Inverted dropout (kernels/cpu/dropout.h): element i uses Philox(seed, stream) at
// index_offset + i; backward regenerates the same mask.
void dropout_forward(const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream,
                     uint64_t index_offset);
void dropout_backward(const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,
                      uint64_t index_offset);
// The same over an [S, B, D] tensor in one call, row (s, b) starting at Philox index
// rows.row_index(s * B + b) (kernels/common/dropout_rows.h); forward and backward alike (the
// mask scales the gradient as it scaled the activation). y may be x.
void dropout_rows(const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p,
                  uint64_t seed, uint64_t stream);

// logits [N, V_local]; targets int32 [N]; loss [N]; lse [N]
void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, int32_t ignore_index, Tensor& loss,
                           Tensor& lse);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                            const kernels::VocabSlice& vs, int32_t ignore_index, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits);
// The vocab-parallel forward in pieces (kernels/cpu/cross_entropy.h), for a caller that
// all-reduces the per-row statistics over the tensor-parallel group in between:
//   cross_entropy_row_max -> row_max [N]                     (then all-reduce MAX)
//   cross_entropy_sum_exp -> sum_exp [N], target_logit [N]   (then all-reduce SUM both)
//   cross_entropy_loss    -> loss [N] and lse [N] (= row_max + log(sum_exp), for backward)
void cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs, Tensor& row_max);
void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, const Tensor& row_max, Tensor& sum_exp,
                           Tensor& target_logit);
void cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                        const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                        Tensor& lse);

// Mixture-of-experts token movement (megatron/transformer/moe/token_dispatcher.h;
// kernels/cpu/moe_rows.h). Indices are int32 on the tensors' device, -1 meaning "no row"; the
// moves copy rows of any dtype as they are (src and out of one dtype).
// out[i] = src[index[i]] (a zero row where index[i] == -1); src [N, D], index [M], out [M, D].
void gather_rows(const Tensor& src, const Tensor& index, Tensor& out);
// out[index[i]] = src[i] where index[i] != -1; the other rows of out keep their values; no row
// may be the target twice. src [M, D], index [M], out [N, D].
void scatter_rows(const Tensor& src, const Tensor& index, Tensor& out);
// out[t] = sum over j = 0..topk-1 of gates[t topk + j] * rows[r], r = index[t topk + j] (index
// null: t topk + j; -1: skipped; gates null: weight 1), accumulated in fp32 in slot order.
// rows [R, D] T; gates fp32 [T topk]; out [T, D] T or fp32 (overwritten).
void moe_combine(const Tensor& rows, const Tensor* index, const Tensor* gates, int64_t topk,
                 Tensor& out);
// The backward of moe_combine without an index: d_rows[i] = gates[i] dy[i / topk] and
// d_gates[i] = dot(dy[i / topk], rows[i]) summed in fp64. rows, d_rows [T topk, D], dy [T, D]:
// T; gates, d_gates: fp32.
void moe_combine_backward(const Tensor& rows, const Tensor& gates, const Tensor& dy, int64_t topk,
                          Tensor& d_rows, Tensor& d_gates);

void add(const Tensor& a, const Tensor& b, Tensor& out);
// y[r, :] += bias for every row of y
void add_bias(Tensor& y, const Tensor& bias);
void add_inplace(Tensor& acc, const Tensor& x);
void scale_inplace(Tensor& x, float s);
// Every element = v (rounded to x's dtype); on a device without a host round trip.
void fill(Tensor& x, float v);
// dst = src converted between fp32, bf16 and fp16 (round to nearest even into 16-bit types,
// as math::float_to_bf16_bits / float_to_fp16_bits); same numel; any pair, on either device.
void cast(const Tensor& src, Tensor& dst);

void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                const math::AdamWParams& p);
double sum_squares(const Tensor& x);
// The sum of squares of several tensors of one device and dtype (one host round trip on a
// device instead of one per tensor); in tensor order on the CPU.
double sum_squares_of(const std::vector<Tensor>& xs);
// Number of elements with !(|x| <= limit): beyond it or not finite (returns to the host).
int64_t count_outside(const Tensor& x, float limit);

}  // namespace megatron::ops
