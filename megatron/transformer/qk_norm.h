#pragma once
// RMSNorm of the queries and keys before rotary embeddings, inside the fused QKV activation
// [S, B, G/tp, H/G + 2, Dh] (the value heads pass through):
//   Span::Head       per head (Megatron-Core's qk_layernorm; Qwen3's and Gemma 3's q_norm /
//                    k_norm): one weight [head_dim] for every query head and one for every key
//                    head, replicated over tensor parallelism; each rank sees only its heads,
//                    so their gradients are tensor-parallel partial sums.
//   Span::Projection over each token's whole query and whole key projection (OLMo-2's q_norm
//                    [heads x head_dim] and k_norm [groups x head_dim]): the weights are split
//                    over tensor parallelism with the heads, and the statistics span every
//                    rank's heads (their partial sums are all-reduced over tp, forward and
//                    backward).
// Parameters "<prefix>.attention.q_norm.weight" and ".k_norm.weight".
#include <string>
#include <vector>

#include "kernels/common/qk_projection.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron {

class QkNorm {
 public:
  enum class Span : uint8_t { Head, Projection };
  struct Ctx {
    Tensor rstd;                    // Head: [S * B * G/tp, H/G + 1]; Projection: [S * B, 2]
    Tensor sums;                    // Projection: the statistics' tensor-parallel sums
    Tensor frozen_dwq, frozen_dwk;  // scratch gradients of frozen weights (dropped)
    Tensor gain_q, gain_k, ones;    // zero-centered gamma: 1 + weight (fp32)
  };
  // zero_centered_gamma: the weights start at 0 and the norms scale by 1 + weight (Gemma 3).
  QkNorm(ParamStore& store, const std::string& prefix, Span span, int64_t heads,
         int64_t query_groups, int64_t head_dim, float eps, parallel::Communicator& tp,
         bool zero_centered_gamma = false);
  // y: the normalized qkv (x is kept by the caller for backward).
  void forward(Ctx& ctx, const Tensor& x, Tensor& y) const;
  // dx may alias dy; accumulates the weights' gradients.
  void backward(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  kernels::QkProjection projection(const Tensor& x) const;
  struct Gains {
    const Tensor &q, &k;
  };
  Gains forward_gains(Ctx& ctx) const;
  Gains backward_gains(const Ctx& ctx) const;
  Tensor& statistics(Ctx& ctx, const Gains& g, const Tensor& x, const Tensor* dy) const;

  Parameter* q_ = nullptr;
  Parameter* k_ = nullptr;
  Span span_;
  int64_t heads_, groups_, head_dim_;
  float eps_;
  bool zero_centered_;
  parallel::Communicator* tp_;
  Device device_;
};

}  // namespace megatron
