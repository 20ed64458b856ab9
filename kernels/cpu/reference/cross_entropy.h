#pragma once
// Naive reference of kernels/cpu/cross_entropy.h (double accumulation).
#include <cstdint>

#include "kernels/cpu/cross_entropy.h"

namespace megatron::kernels::ref {

void cross_entropy_row_max(const float* logits, int64_t N, const VocabSlice& vs, float* row_max);
void cross_entropy_sum_exp(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit);
void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss);
void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse);
void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, float* dlogits);

}  // namespace megatron::kernels::ref
