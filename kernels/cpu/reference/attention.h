#pragma once
// Naive reference of kernels/cpu/attention.h: per-element loops in double, dropout mask drawn
// with one philox::uniform call per probability.
#include "kernels/cpu/attention.h"

namespace megatron::kernels::ref {

void attention_forward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs);
void attention_backward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);
// With attention sinks: sinks [H], a logit per head in each row's softmax denominator
// (Megatron-Core's softmax_offset), so the probabilities sum to less than 1; backward also
// writes the sinks' gradient dsinks [H] from the rows' missing probability.
void attention_forward_with_sinks(const AttentionShape& shape, const AttentionOptions& opt,
                                  const float* qkv, const float* sinks, float* out, float* probs);
void attention_backward_with_sinks(const AttentionShape& shape, const AttentionOptions& opt,
                                   const float* qkv, const float* probs, const float* dout,
                                   float* dqkv, float* dsinks);

}  // namespace megatron::kernels::ref
