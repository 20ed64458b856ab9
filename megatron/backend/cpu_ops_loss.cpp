// CPU backend: the vocab-parallel cross-entropy.
#include "megatron/backend/cpu_ops.h"
#include "megatron/backend/op_impl.h"

namespace megatron::ops {
using namespace impl;

void CpuOps::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                   const kernels::VocabSlice& vs, int32_t ignore_index,
                                   Tensor& loss, Tensor& lse) const {
  const char* op = "cross_entropy_forward";
  const int64_t n = targets.numel();
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&loss, "loss", Role::F32, kWritten},
                          {&lse, "lse", Role::F32, kWritten}});
  if (logits.dtype() == DType::BF16) {  // the largest activation: read as stored, never widened
    cpu::cross_entropy_forward(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs, ignore_index,
                               loss.data<float>(), lse.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_forward(f.in(logits), targets.data<int32_t>(), n, vs, ignore_index,
                             f.out(loss), f.out(lse));
  f.finish();
}

void CpuOps::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                    const kernels::VocabSlice& vs, int32_t ignore_index,
                                    const Tensor& lse, const Tensor& dloss, Tensor& dlogits) const {
  const char* op = "cross_entropy_backward";
  const int64_t n = targets.numel();
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&lse, "lse", Role::F32},
                          {&dloss, "dloss", Role::F32},
                          {&dlogits, "dlogits", Role::T, kWritten}});
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_backward(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs, ignore_index,
                                lse.data<float>(), dloss.data<float>(), dlogits.data<bf16_t>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_backward(f.in(logits), targets.data<int32_t>(), n, vs, ignore_index, f.in(lse),
                              f.in(dloss), f.out(dlogits));
  f.finish();
}

void CpuOps::cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs,
                                   Tensor& row_max) const {
  const char* op = "cross_entropy_row_max";
  const int64_t n = rows_of(logits, vs.V_local);
  const FloatArgs fa(op, {{&logits, "logits"}, {&row_max, "row_max", Role::F32, kWritten}});
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_row_max(logits.data<bf16_t>(), n, vs, row_max.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_row_max(f.in(logits), n, vs, f.out(row_max));
  f.finish();
}

void CpuOps::cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                                   const kernels::VocabSlice& vs, const Tensor& row_max,
                                   Tensor& sum_exp, Tensor& target_logit) const {
  const char* op = "cross_entropy_sum_exp";
  const int64_t n = targets.numel();
  const FloatArgs fa(op, {{&logits, "logits"},
                          {&row_max, "row_max", Role::F32},
                          {&sum_exp, "sum_exp", Role::F32, kWritten},
                          {&target_logit, "target_logit", Role::F32, kWritten}});
  if (logits.dtype() == DType::BF16) {
    cpu::cross_entropy_sum_exp(logits.data<bf16_t>(), targets.data<int32_t>(), n, vs,
                               row_max.data<float>(), sum_exp.data<float>(),
                               target_logit.data<float>());
    return;
  }
  Fp32OnCpu f(fa);
  cpu::cross_entropy_sum_exp(f.in(logits), targets.data<int32_t>(), n, vs, f.in(row_max),
                             f.out(sum_exp), f.out(target_logit));
  f.finish();
}

void CpuOps::cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                                const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                                Tensor& lse) const {
  const char* op = "cross_entropy_loss";
  const int64_t n = targets.numel();
  const FloatArgs fa(op, {{&row_max, "row_max", Role::F32},
                          {&sum_exp, "sum_exp", Role::F32},
                          {&target_logit, "target_logit", Role::F32},
                          {&loss, "loss", Role::F32, kWritten},
                          {&lse, "lse", Role::F32, kWritten}});
  Fp32OnCpu f(fa);
  cpu::cross_entropy_loss(targets.data<int32_t>(), n, ignore_index, f.in(row_max), f.in(sum_exp),
                          f.in(target_logit), f.out(loss));
  const float* mx = f.in(row_max);
  const float* se = f.in(sum_exp);
  float* out = f.out(lse);
  for (int64_t i = 0; i < n; ++i) out[i] = mx[i] + std::log(se[i]);
  f.finish();
}

}  // namespace megatron::ops
