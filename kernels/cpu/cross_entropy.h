#pragma once
// Softmax cross-entropy fused over logits [N, V_local] holding vocabulary columns
// [vocab_start, vocab_start + V_local). Columns with global index >= valid_vocab (padding of the
// vocabulary) are excluded from the softmax. Targets equal to ignore_index give loss 0 and no
// gradient.
//
// The per-row statistics are split out so a vocab-parallel caller can combine them over the
// tensor-parallel group (max, then sum-exp, then target logit) without gathering logits:
//   1. cross_entropy_row_max      -> row_max[N]          (all-reduce MAX)
//   2. cross_entropy_sum_exp      -> sum_exp[N], target_logit[N] (all-reduce SUM both)
//   3. loss[n] = log(sum_exp) + row_max - target_logit   (cross_entropy_loss)
//   4. cross_entropy_backward     -> dlogits from softmax recomputed with the global stats
// cross_entropy_forward does 1-3 for the single-device case.
#include <cstdint>

#include "kernels/common/vocab_slice.h"
#include "megatron/core/dtype.h"

namespace megatron::kernels::cpu {

// Each takes fp32 or bf16 logits (bf16: read as stored, statistics in fp32, dlogits rounded once).
void cross_entropy_row_max(const float* logits, int64_t N, const VocabSlice& vs, float* row_max);
void cross_entropy_row_max(const bf16_t* logits, int64_t N, const VocabSlice& vs, float* row_max);
// target_logit is 0 for rows whose target lies outside this slice or is ignored.
void cross_entropy_sum_exp(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit);
void cross_entropy_sum_exp(const bf16_t* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit);
void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss);

// Single-device convenience: writes loss[N] and the log-sum-exp lse[N] (for backward).
void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse);
void cross_entropy_forward(const bf16_t* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse);

// dlogits[n, v] = dloss[n] * (softmax_v - [v == target]) with softmax = exp(logit - lse[n]);
// 0 for padding columns and ignored rows. dlogits may alias logits (in-place).
void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, float* dlogits);
void cross_entropy_backward(const bf16_t* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, bf16_t* dlogits);

}  // namespace megatron::kernels::cpu
