#pragma once
// Attention sinks (Megatron-Core's softmax_type learnable / off-by-one; GPT-OSS's `sinks`): a
// logit sigma_h per head that joins every query row's softmax denominator without a value,
//   p_ij = exp(s_ij) / (sum_k exp(s_ik) + exp(sigma_h)).
// With the row's log-sum-exp lse_i = log sum_k exp(s_ik) (what the flash kernels keep) that is
// the ordinary attention output scaled by r_i = sigmoid(lse_i - sigma_h), so the sinks wrap the
// flash kernels instead of changing them:
//   forward:  out *= r (in place);
//   backward: dout' = r dout into the flash backward together with the scaled out (its
//             rowsum(dout' * out) is then the sink softmax's), and
//             d sigma_h = -sum_i (1 - r_i) dout_i . out_i.
// A fully masked row (lse -inf) keeps its zeros. out [S, B, H, Dh] and lse [B, H, S] of this
// rank's H heads; sinks and dsinks [H]; fp32.
#include "kernels/common/attention_shape.h"

namespace megatron::kernels::cpu {

void attention_sinks_forward(const AttentionShape& shape, const float* sinks, const float* lse,
                             float* out);
// dout_scaled may be dout; dsinks (accumulated into) may be null (fixed sinks: off-by-one).
void attention_sinks_backward(const AttentionShape& shape, const float* sinks, const float* lse,
                              const float* out, const float* dout, float* dout_scaled,
                              float* dsinks);

}  // namespace megatron::kernels::cpu
