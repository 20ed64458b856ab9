#pragma once
// Attention sinks around the attention core's flash kernels (model.softmax_type; Megatron-Core's
// softmax_type / core_attention.softmax_offset; GPT-OSS's `sinks`): a logit per head in every
// query row's softmax denominator, learned (a parameter <prefix>.attention.softmax_offset
// [heads], split over tp with the heads, normal(0, init_std) as Megatron-Core initializes it,
// no weight decay) or fixed at 0 (off-by-one). The kernels' arithmetic:
// kernels/cpu/attention_sinks.h.
#include <string>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"

namespace megatron {

class AttentionSinks {
 public:
  AttentionSinks(ParamStore& store, const std::string& prefix, int64_t heads, bool learned,
                 float init_std, parallel::Communicator& tp);

  void collect_params(std::vector<Parameter*>& out) const;
  // This rank's logits as F32 [heads / tp]: the weights, or their fp32 copy in `scratch`.
  const Tensor& logits(Tensor& scratch) const;
  // out (the flash output) scaled in place; lse is the flash forward's.
  void forward(const kernels::AttentionShape& as, const Tensor& lse, Tensor& scratch,
               Tensor& out) const;
  // d_out -> d_scaled for the flash backward (with the scaled out); the logits' gradient added
  // into the parameter's.
  void backward(const kernels::AttentionShape& as, const Tensor& lse, const Tensor& out,
                const Tensor& d_out, Tensor& scratch, Tensor& d_scaled) const;

 private:
  Parameter* param_ = nullptr;  // learned; else fixed_ (zeros)
  Tensor fixed_;
  Device device_;
};

}  // namespace megatron
