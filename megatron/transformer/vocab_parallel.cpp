#include "megatron/transformer/vocab_parallel.h"

#include "megatron/backend/ops.h"

namespace megatron {

kernels::VocabSlice vocab_slice(int64_t padded_vocab, int64_t valid_vocab,
                                const parallel::Communicator& tp) {
  MT_CHECK(padded_vocab % tp.size() == 0, "padded vocab ", padded_vocab,
           " not divisible by tensor parallel size ", tp.size());
  kernels::VocabSlice vs;
  vs.V_local = padded_vocab / tp.size();
  vs.vocab_start = vs.V_local * tp.rank();
  vs.valid_vocab = valid_vocab;
  return vs;
}

void vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels,
                                  const kernels::VocabSlice& vs, int32_t ignore_index,
                                  parallel::Communicator& tp, Tensor& losses, Tensor& lse) {
  if (tp.size() == 1) {
    ops::cross_entropy_forward(logits, labels, vs, ignore_index, losses, lse);
    return;
  }
  // The same CPU kernels as cross_entropy_forward (or their CUDA versions), with the per-row
  // statistics all-reduced over the vocabulary slices in between.
  const int64_t n = labels.numel();
  Tensor row_max = Tensor::empty({n}, DType::F32, logits.device()),
         sum_exp = Tensor::empty({n}, DType::F32, logits.device()),
         target = Tensor::empty({n}, DType::F32, logits.device());
  ops::cross_entropy_row_max(logits, vs, row_max);
  tp.all_reduce(row_max, parallel::ReduceOp::Max);
  ops::cross_entropy_sum_exp(logits, labels, vs, row_max, sum_exp, target);
  tp.all_reduce(sum_exp, parallel::ReduceOp::Sum);
  tp.all_reduce(target, parallel::ReduceOp::Sum);
  ops::cross_entropy_loss(labels, ignore_index, row_max, sum_exp, target, losses, lse);
}

}  // namespace megatron
