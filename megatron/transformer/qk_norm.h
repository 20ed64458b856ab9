#pragma once
// Per-head RMSNorm of the queries and keys before rotary embeddings (Megatron-Core's
// qk_layernorm; Qwen3's and Gemma 3's q_norm / k_norm): one weight [head_dim] for every query
// head and one for every key head, applied inside the fused QKV activation
// [S, B, G/tp, H/G + 2, Dh] (the value heads pass through). The weights are replicated over
// tensor parallelism and each rank sees only its heads, so their gradients are tensor-parallel
// partial sums. Parameters "<prefix>.attention.q_norm.weight" and ".k_norm.weight".
#include <string>
#include <vector>

#include "megatron/params/parameter.h"

namespace megatron {

class QkNorm {
 public:
  struct Ctx {
    Tensor rstd;                    // [S * B * G/tp, H/G + 1]
    Tensor frozen_dwq, frozen_dwk;  // scratch gradients of frozen weights (dropped)
  };
  QkNorm(ParamStore& store, const std::string& prefix, int64_t head_dim, int64_t heads_per_group,
         float eps, int64_t tp_size);
  // y: the normalized qkv (x is kept by the caller for backward).
  void forward(Ctx& ctx, const Tensor& x, Tensor& y) const;
  // dx may alias dy; accumulates the weights' gradients.
  void backward(Ctx& ctx, const Tensor& x, const Tensor& dy, Tensor& dx) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  Parameter* q_ = nullptr;
  Parameter* k_ = nullptr;
  int64_t head_dim_, heads_per_group_;
  float eps_;
  Device device_;
};

}  // namespace megatron
