#include "megatron/transformer/vocab_parallel.h"

#include <cmath>

#include "megatron/backend/ops.h"

namespace megatron {

kernels::cpu::VocabSlice vocab_slice(int64_t padded_vocab, int64_t valid_vocab,
                                     const parallel::Communicator& tp) {
  MT_CHECK(padded_vocab % tp.size() == 0, "padded vocab ", padded_vocab,
           " not divisible by tensor parallel size ", tp.size());
  kernels::cpu::VocabSlice vs;
  vs.V_local = padded_vocab / tp.size();
  vs.vocab_start = vs.V_local * tp.rank();
  vs.valid_vocab = valid_vocab;
  return vs;
}

void vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& labels,
                                  const kernels::cpu::VocabSlice& vs, int32_t ignore_index,
                                  parallel::Communicator& tp, Tensor& losses, Tensor& lse) {
  if (tp.size() == 1) {
    ops::cross_entropy_forward(logits, labels, vs, ignore_index, losses, lse);
    return;
  }
  namespace cpu = kernels::cpu;
  const int64_t n = labels.numel();
  Tensor row_max = Tensor::empty({n}, DType::F32), sum_exp = Tensor::empty({n}, DType::F32),
         target = Tensor::empty({n}, DType::F32);
  cpu::cross_entropy_row_max(logits.data<float>(), n, vs, row_max.data<float>());
  tp.all_reduce(row_max, parallel::ReduceOp::Max);
  cpu::cross_entropy_sum_exp(logits.data<float>(), labels.data<int32_t>(), n, vs,
                             row_max.data<float>(), sum_exp.data<float>(), target.data<float>());
  tp.all_reduce(sum_exp, parallel::ReduceOp::Sum);
  tp.all_reduce(target, parallel::ReduceOp::Sum);
  cpu::cross_entropy_loss(labels.data<int32_t>(), n, ignore_index, row_max.data<float>(),
                          sum_exp.data<float>(), target.data<float>(), losses.data<float>());
  for (int64_t i = 0; i < n; ++i)
    lse.data<float>()[i] = row_max.data<float>()[i] + std::log(sum_exp.data<float>()[i]);
}

}  // namespace megatron
