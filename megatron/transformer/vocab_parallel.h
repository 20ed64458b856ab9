#pragma once
// Vocabulary-parallel output layers: the LM head's logits are split over tensor parallel along
// the vocabulary ([N, V_padded / tp] per rank), and the cross-entropy reduces the row max, the
// sum of exponentials and the target logit over the group, so full logits are never gathered.
#include <cstdint>

#include "kernels/common/vocab_slice.h"
#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron {

// This rank's slice of a padded vocabulary of which the first valid_vocab ids are real tokens.
kernels::VocabSlice vocab_slice(int64_t padded_vocab, int64_t valid_vocab,
                                const parallel::Communicator& tp);

// logits [N, V_local] (this rank's slice), labels int32 [N]; writes losses [N] (0 where the
// label is ignore_index) and lse [N] (the full-vocabulary log-sum-exp, for backward, which is
// ops::cross_entropy_backward on the local slice).
void vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels,
                                  const kernels::VocabSlice& vs, int32_t ignore_index,
                                  parallel::Communicator& tp, Tensor& losses, Tensor& lse);

}  // namespace megatron
