#include "kernels/cpu/reference/cross_entropy.h"

#include <cmath>
#include <limits>

namespace megatron::kernels::ref {
namespace {

// Whether local column v of the slice is a real (non-padding) token.
bool real_column(const VocabSlice& vs, int64_t v) { return vs.vocab_start + v < vs.valid_vocab; }

}  // namespace

void cross_entropy_row_max(const float* logits, int64_t N, const VocabSlice& vs, float* row_max) {
  for (int64_t n = 0; n < N; ++n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < vs.V_local; ++v)
      if (real_column(vs, v) && logits[n * vs.V_local + v] > mx) mx = logits[n * vs.V_local + v];
    row_max[n] = mx;
  }
}

void cross_entropy_sum_exp(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit) {
  for (int64_t n = 0; n < N; ++n) {
    double sum = 0.0;
    target_logit[n] = 0.0f;
    for (int64_t v = 0; v < vs.V_local; ++v) {
      if (!real_column(vs, v)) continue;
      sum += std::exp(double(logits[n * vs.V_local + v]) - row_max[n]);
      if (vs.vocab_start + v == targets[n]) target_logit[n] = logits[n * vs.V_local + v];
    }
    sum_exp[n] = float(sum);
  }
}

void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss) {
  for (int64_t n = 0; n < N; ++n) {
    loss[n] = targets[n] == ignore_index
                  ? 0.0f
                  : float(std::log(double(sum_exp[n])) + row_max[n] - target_logit[n]);
  }
}

void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = logits + n * vs.V_local;
    double mx = -std::numeric_limits<double>::infinity(), target = 0.0;
    for (int64_t v = 0; v < vs.V_local; ++v)
      if (real_column(vs, v)) mx = std::fmax(mx, row[v]);
    double sum = 0.0;
    for (int64_t v = 0; v < vs.V_local; ++v) {
      if (!real_column(vs, v)) continue;
      sum += std::exp(row[v] - mx);
      if (vs.vocab_start + v == targets[n]) target = row[v];
    }
    const double log_sum_exp = mx + std::log(sum);
    lse[n] = float(log_sum_exp);
    loss[n] = targets[n] == ignore_index ? 0.0f : float(log_sum_exp - target);
  }
}

void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, float* dlogits) {
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < vs.V_local; ++v) {
      const int64_t i = n * vs.V_local + v;
      if (targets[n] == ignore_index || !real_column(vs, v)) {
        dlogits[i] = 0.0f;
        continue;
      }
      const double softmax = std::exp(double(logits[i]) - lse[n]);
      const double onehot = vs.vocab_start + v == targets[n] ? 1.0 : 0.0;
      dlogits[i] = float(dloss[n] * (softmax - onehot));
    }
  }
}

}  // namespace megatron::kernels::ref
