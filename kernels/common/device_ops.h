#pragma once
// The ops of one device as an object: the interface the CPU backend (megatron/backend/cpu_ops.h)
// and the CUDA backend (megatron/backend/cuda/ops_cuda.h) implement. megatron/backend/ops.h is
// the front end every layer calls: it checks that an op's tensors share one device and that
// their shapes agree, then hands the call to that device's backend, which checks the dtypes it
// runs and launches its kernels. ops::device_ops(Device) (megatron/backend/device_ops_for.h)
// picks the backend; a model asks for it when it is built, so a device the build has no backend
// for is an error then, not at the first op.
//
// The semantics of each op, its arguments and the dtypes each backend takes are documented in
// megatron/backend/ops.h and megatron/backend/cuda/ops_cuda.h; the methods here have the same
// names and arguments (without ops.h's default arguments). Backends hold no per-call state and
// are shared: every method is const.
#include <cstdint>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "kernels/common/dropout_rows.h"
#include "kernels/common/numeric.h"
#include "kernels/common/qk_projection.h"
#include "kernels/common/vocab_slice.h"
#include "megatron/core/tensor.h"

namespace megatron::ops {

// Every op as OP(return type, name, (parameters)): the one list of the backends' signatures,
// declared below as DeviceOps' pure virtual methods and in each backend as its overrides
// (MEGATRON_DEVICE_OPS_OVERRIDES), so adding an op means adding it here and defining it in each
// backend. rope's positions: int32 [S, B] on the device, checked by the front end, or null;
// sum_squares_of: non-empty, one device and dtype (checked by the front end).
// clang-format off
#define MEGATRON_DEVICE_OPS(OP)                                                                    \
  OP(void, linear_forward, (const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y))         \
  OP(void, linear_backward,                                                                        \
     (const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw, Tensor* db))     \
  OP(void, layernorm_forward,                                                                      \
     (const Tensor& x, const Tensor& w, const Tensor& b, float eps, Tensor& y, Tensor& mean,       \
      Tensor& rstd))                                                                               \
  OP(void, layernorm_backward,                                                                     \
     (const Tensor& x, const Tensor& w, const Tensor& mean, const Tensor& rstd, const Tensor& dy,  \
      Tensor& dx, Tensor& dw, Tensor& db))                                                         \
  OP(void, rmsnorm_forward,                                                                        \
     (const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd))                       \
  OP(void, rmsnorm_backward,                                                                       \
     (const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx,          \
      Tensor& dw))                                                                                 \
  OP(void, qk_rmsnorm_forward,                                                                     \
     (const Tensor& x, const Tensor& wq, const Tensor& wk, float eps, int64_t q_slots, Tensor& y,  \
      Tensor& rstd))                                                                               \
  OP(void, qk_rmsnorm_backward,                                                                    \
     (const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& rstd, const Tensor& dy,   \
      int64_t q_slots, Tensor& dx, Tensor& dwq, Tensor& dwk))                                      \
  OP(void, qk_projection_sums,                                                                     \
     (const Tensor& x, const Tensor* dy, const Tensor& wq, const Tensor& wk,                       \
      const kernels::QkProjection& p, Tensor& sums))                                               \
  OP(void, qk_projection_norm_forward,                                                             \
     (const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& sums,                     \
      const kernels::QkProjection& p, Tensor& y, Tensor& rstd))                                    \
  OP(void, qk_projection_norm_backward,                                                            \
     (const Tensor& x, const Tensor& wq, const Tensor& wk, const Tensor& rstd, const Tensor& dots, \
      const Tensor& dy, const kernels::QkProjection& p, Tensor& dx, Tensor& dwq, Tensor& dwk))     \
  OP(void, gelu_forward, (const Tensor& x, Tensor& y, math::Gelu kind))                            \
  OP(void, gelu_backward, (const Tensor& x, const Tensor& dy, Tensor& dx, math::Gelu kind))        \
  OP(void, tanh_forward, (const Tensor& x, Tensor& y))                                             \
  OP(void, tanh_backward, (const Tensor& y, const Tensor& dy, Tensor& dx))                         \
  OP(void, glu_forward, (const Tensor& x, Tensor& y, math::Glu glu))                               \
  OP(void, glu_backward, (const Tensor& x, const Tensor& dy, Tensor& dx, math::Glu glu))           \
  OP(void, embedding_forward,                                                                      \
     (const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out))                   \
  OP(void, embedding_backward,                                                                     \
     (const Tensor& ids, const Tensor& dout, int64_t vocab_start, Tensor& dtable))                 \
  OP(void, attention_forward,                                                                      \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const Tensor& qkv, Tensor& out, Tensor& probs))                                              \
  OP(void, attention_backward,                                                                     \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const Tensor& qkv, const Tensor& probs, const Tensor& dout, Tensor& dqkv))                   \
  OP(void, flash_attention_forward,                                                                \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const Tensor& qkv, Tensor& out, Tensor& lse))                                                \
  OP(void, flash_attention_backward,                                                               \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dqkv))  \
  OP(void, flash_attention_block_forward,                                                          \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const kernels::AttentionBlock& block, const Tensor& q, const Tensor& kv, Tensor& out,        \
      Tensor& lse))                                                                                \
  OP(void, flash_attention_block_backward,                                                         \
     (const kernels::AttentionShape& shape, const kernels::AttentionOptions& opt,                  \
      const kernels::AttentionBlock& block, const Tensor& q, const Tensor& kv, const Tensor& out,  \
      const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dkv))                             \
  OP(void, flash_attention_merge,                                                                  \
     (const Tensor& out, const Tensor& lse, Tensor& acc_out, Tensor& acc_lse, int64_t acc_row))    \
  OP(void, kv_cache_attention,                                                                     \
     (const kernels::AttentionShape& shape, float scale, const Tensor& qkv, Tensor& keys,          \
      Tensor& values, int64_t past, Tensor& out, int64_t window, float softcap,                    \
      const Tensor* sinks))                                                                        \
  OP(void, attention_sinks_forward,                                                                \
     (const kernels::AttentionShape& shape, const Tensor& sinks, const Tensor& lse, Tensor& out))  \
  OP(void, attention_sinks_backward,                                                               \
     (const kernels::AttentionShape& shape, const Tensor& sinks, const Tensor& lse,                \
      const Tensor& out, const Tensor& dout, Tensor& dout_scaled, Tensor* dsinks))                 \
  OP(void, rope_forward,                                                                           \
     (const kernels::AttentionShape& shape, Tensor& qkv, const math::RopeFrequencies& rope,        \
      int64_t position_offset, const Tensor* positions))                                           \
  OP(void, rope_backward,                                                                          \
     (const kernels::AttentionShape& shape, Tensor& dqkv, const math::RopeFrequencies& rope,       \
      int64_t position_offset, const Tensor* positions))                                           \
  OP(void, dropout_forward,                                                                        \
     (const Tensor& x, Tensor& y, float p, uint64_t seed, uint64_t stream, uint64_t index_offset)) \
  OP(void, dropout_backward,                                                                       \
     (const Tensor& dy, Tensor& dx, float p, uint64_t seed, uint64_t stream,                       \
      uint64_t index_offset))                                                                      \
  OP(void, dropout_rows,                                                                           \
     (const Tensor& x, Tensor& y, const kernels::DropoutRows& rows, float p, uint64_t seed,        \
      uint64_t stream))                                                                            \
  OP(void, cross_entropy_forward,                                                                  \
     (const Tensor& logits, const Tensor& targets, const kernels::VocabSlice& vs,                  \
      int32_t ignore_index, Tensor& loss, Tensor& lse))                                            \
  OP(void, cross_entropy_backward,                                                                 \
     (const Tensor& logits, const Tensor& targets, const kernels::VocabSlice& vs,                  \
      int32_t ignore_index, const Tensor& lse, const Tensor& dloss, Tensor& dlogits))              \
  OP(void, cross_entropy_row_max,                                                                  \
     (const Tensor& logits, const kernels::VocabSlice& vs, Tensor& row_max))                       \
  OP(void, cross_entropy_sum_exp,                                                                  \
     (const Tensor& logits, const Tensor& targets, const kernels::VocabSlice& vs,                  \
      const Tensor& row_max, Tensor& sum_exp, Tensor& target_logit))                               \
  OP(void, cross_entropy_loss,                                                                     \
     (const Tensor& targets, int32_t ignore_index, const Tensor& row_max, const Tensor& sum_exp,   \
      const Tensor& target_logit, Tensor& loss, Tensor& lse))                                      \
  OP(void, gather_rows, (const Tensor& src, const Tensor& index, Tensor& out))                     \
  OP(void, scatter_rows, (const Tensor& src, const Tensor& index, Tensor& out))                    \
  OP(void, moe_combine,                                                                            \
     (const Tensor& rows, const Tensor* index, const Tensor* gates, int64_t topk, Tensor& out))    \
  OP(void, moe_combine_backward,                                                                   \
     (const Tensor& rows, const Tensor& gates, const Tensor& dy, int64_t topk, Tensor& d_rows,     \
      Tensor& d_gates))                                                                            \
  OP(void, add, (const Tensor& a, const Tensor& b, Tensor& out))                                   \
  OP(void, add_bias, (Tensor& y, const Tensor& bias))                                             \
  OP(void, add_inplace, (Tensor& acc, const Tensor& x))                                           \
  OP(void, scale_inplace, (Tensor& x, float s))                                                   \
  OP(void, fill, (Tensor& x, float v))                                                            \
  OP(void, cast, (const Tensor& src, Tensor& dst))                                                 \
  OP(void, adamw_step,                                                                             \
     (Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const math::AdamWParams& p))       \
  OP(double, sum_squares, (const Tensor& x))                                                       \
  OP(double, sum_squares_of, (const std::vector<Tensor>& xs))                                      \
  OP(int64_t, count_outside, (const Tensor& x, float limit))
// clang-format on

#define MEGATRON_DEVICE_OP_PURE(ret, name, params) virtual ret name params const = 0;
#define MEGATRON_DEVICE_OP_OVERRIDE(ret, name, params) ret name params const override;
// In a backend's class: its declarations of every op.
#define MEGATRON_DEVICE_OPS_OVERRIDES MEGATRON_DEVICE_OPS(MEGATRON_DEVICE_OP_OVERRIDE)

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual Device device() const = 0;
  MEGATRON_DEVICE_OPS(MEGATRON_DEVICE_OP_PURE)
};

}  // namespace megatron::ops
