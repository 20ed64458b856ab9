// The ops' front end: cross entropy, whole and vocabulary-parallel in steps.
#include "megatron/backend/op_checks.h"

namespace megatron::ops {
using namespace impl;

void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, int32_t ignore_index, Tensor& loss,
                           Tensor& lse) {
  const char* op = "cross_entropy_forward";
  const Device dev =
      device_of(op, {{&logits, "logits"}, {&targets, "targets"}, {&loss, "loss"}, {&lse, "lse"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && loss.numel() == n && lse.numel() == n,
           "cross_entropy_forward: logits ", logits.shape().str(), " vs ", n, " targets");
  device_call(dev, op)->cross_entropy_forward(logits, targets, vs, ignore_index, loss, lse);
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                            const kernels::VocabSlice& vs, int32_t ignore_index, const Tensor& lse,
                            const Tensor& dloss, Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const Device dev = device_of(op, {{&logits, "logits"},
                                    {&targets, "targets"},
                                    {&lse, "lse"},
                                    {&dloss, "dloss"},
                                    {&dlogits, "dlogits"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && dlogits.numel() == logits.numel() &&
               dloss.numel() == n && lse.numel() == n,
           "cross_entropy_backward: shape mismatch");
  device_call(dev, op)->cross_entropy_backward(logits, targets, vs, ignore_index, lse, dloss,
                                               dlogits);
}

void cross_entropy_row_max(const Tensor& logits, const kernels::VocabSlice& vs, Tensor& row_max) {
  const char* op = "cross_entropy_row_max";
  const Device dev = device_of(op, {{&logits, "logits"}, {&row_max, "row_max"}});
  const int64_t n = rows_of(logits, vs.V_local);
  MT_CHECK(row_max.numel() == n, "cross_entropy_row_max: row_max ", row_max.shape().str(), " for ",
           n, " rows");
  device_call(dev, op)->cross_entropy_row_max(logits, vs, row_max);
}

void cross_entropy_sum_exp(const Tensor& logits, const Tensor& targets,
                           const kernels::VocabSlice& vs, const Tensor& row_max, Tensor& sum_exp,
                           Tensor& target_logit) {
  const char* op = "cross_entropy_sum_exp";
  const Device dev = device_of(op, {{&logits, "logits"},
                                    {&targets, "targets"},
                                    {&row_max, "row_max"},
                                    {&sum_exp, "sum_exp"},
                                    {&target_logit, "target_logit"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(logits.numel() == n * vs.V_local && row_max.numel() == n && sum_exp.numel() == n &&
               target_logit.numel() == n,
           "cross_entropy_sum_exp: logits ", logits.shape().str(), " vs ", n, " targets");
  device_call(dev, op)->cross_entropy_sum_exp(logits, targets, vs, row_max, sum_exp, target_logit);
}

void cross_entropy_loss(const Tensor& targets, int32_t ignore_index, const Tensor& row_max,
                        const Tensor& sum_exp, const Tensor& target_logit, Tensor& loss,
                        Tensor& lse) {
  const char* op = "cross_entropy_loss";
  const Device dev = device_of(op, {{&targets, "targets"},
                                    {&row_max, "row_max"},
                                    {&sum_exp, "sum_exp"},
                                    {&target_logit, "target_logit"},
                                    {&loss, "loss"},
                                    {&lse, "lse"}});
  require_i32(op, targets, "targets");
  const int64_t n = targets.numel();
  MT_CHECK(row_max.numel() == n && sum_exp.numel() == n && target_logit.numel() == n &&
               loss.numel() == n && lse.numel() == n,
           "cross_entropy_loss: every statistic must have one value per target (", n, ")");
  device_call(dev, op)->cross_entropy_loss(targets, ignore_index, row_max, sum_exp, target_logit,
                                           loss, lse);
}

}  // namespace megatron::ops
