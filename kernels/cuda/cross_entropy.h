#pragma once
// Softmax cross-entropy over logits [N, V_local] holding vocabulary columns
// [vocab_start, vocab_start + V_local), op for op kernels/cpu/cross_entropy.h (same split
// pieces for the vocab-parallel case, same fused single-device forward/backward): columns with
// global index >= valid_vocab are excluded; targets equal to ignore_index give loss 0 and no
// gradient. Logits/dlogits are T (float, bf16, f16); statistics, losses and dloss are fp32.
// One block per row.
//
// Difference from the CPU kernel: cross_entropy_forward on the CPU rejects out-of-vocabulary
// targets with an error; a kernel cannot throw, so here such a target simply has no column
// (target logit 0), exactly as a target owned by another vocab shard.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/vocab_slice.h"

namespace megatron::kernels::cuda {

template <typename T>
void cross_entropy_row_max(const T* logits, int64_t N, const VocabSlice& vs, float* row_max,
                           cudaStream_t stream);
template <typename T>
void cross_entropy_sum_exp(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                           const float* row_max, float* sum_exp, float* target_logit,
                           cudaStream_t stream);
void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss, cudaStream_t stream);
// lse[n] = row_max[n] + log(sum_exp[n]) from the combined statistics (for the backward).
void cross_entropy_lse(const float* row_max, const float* sum_exp, int64_t N, float* lse,
                       cudaStream_t stream);

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                           int32_t ignore_index, float* loss, float* lse, cudaStream_t stream);
// dlogits may alias logits (in place).
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, T* dlogits, cudaStream_t stream);

}  // namespace megatron::kernels::cuda
