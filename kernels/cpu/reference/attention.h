#pragma once
// Naive reference of kernels/cpu/attention.h: per-element loops in double, dropout mask drawn
// with one philox::uniform call per probability.
#include "kernels/cpu/attention.h"

namespace megatron::kernels::ref {

void attention_forward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs);
void attention_backward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv);

}  // namespace megatron::kernels::ref
