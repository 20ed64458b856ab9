#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "kernels/common/numeric.h"
#include "kernels/cpu/kernel_util.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

// Local columns [0, valid) hold real tokens; the rest of the slice is vocabulary padding.
int64_t valid_columns(const VocabSlice& vs) {
  return std::clamp<int64_t>(vs.valid_vocab - vs.vocab_start, 0, vs.V_local);
}

// Local column of the target, or -1 when it lies outside the slice's real columns.
int64_t target_column(int32_t target, const VocabSlice& vs, int64_t valid) {
  const int64_t c = int64_t(target) - vs.vocab_start;
  return c >= 0 && c < valid ? c : -1;
}

bool parallel(int64_t N, const VocabSlice& vs) { return N * vs.V_local > detail::kParallelGrain; }

}  // namespace

namespace {
using detail::from_f32;
using detail::to_f32;

template <typename T>
void row_max_impl(const T* logits, int64_t N, const VocabSlice& vs, float* row_max) {
  const int64_t valid = valid_columns(vs);
#pragma omp parallel for schedule(static) if (parallel(N, vs))
  for (int64_t n = 0; n < N; ++n) {
    // -inf when the slice has no real column: neutral for the MAX all-reduce.
    row_max[n] = detail::max_of(logits + n * vs.V_local, valid);
  }
}

template <typename T>
void sum_exp_impl(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                  const float* row_max, float* sum_exp, float* target_logit) {
  const int64_t valid = valid_columns(vs);
#pragma omp parallel for schedule(static) if (parallel(N, vs))
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * vs.V_local;
    const float mx = row_max[n];
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < valid; ++v) sum += math::exp_approx(to_f32(row[v]) - mx);
    sum_exp[n] = sum;
    const int64_t c = target_column(targets[n], vs, valid);
    target_logit[n] = c >= 0 ? to_f32(row[c]) : 0.0f;
  }
}

template <typename T>
void forward_impl(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                  int32_t ignore_index, float* loss, float* lse) {
  if (vs.vocab_start == 0 && vs.V_local >= vs.valid_vocab) {  // whole vocabulary: check targets
    for (int64_t n = 0; n < N; ++n)
      MT_CHECK(targets[n] == ignore_index || (targets[n] >= 0 && targets[n] < vs.valid_vocab),
               "cross_entropy_forward: target ", targets[n], " at row ", n,
               " outside vocabulary of ", vs.valid_vocab);
  }
  const int64_t valid = valid_columns(vs);
#pragma omp parallel for schedule(static) if (parallel(N, vs))
  for (int64_t n = 0; n < N; ++n) {
    // The three stages of the split interface fused per row: the exp pass finds it in cache.
    const T* row = logits + n * vs.V_local;
    const float mx = detail::max_of(row, valid);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < valid; ++v) sum += math::exp_approx(to_f32(row[v]) - mx);
    lse[n] = mx + std::log(sum);
    const int64_t c = target_column(targets[n], vs, valid);
    const float target = c >= 0 ? to_f32(row[c]) : 0.0f;
    loss[n] = targets[n] == ignore_index ? 0.0f : std::log(sum) + mx - target;
  }
}

template <typename T>
void backward_impl(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                   int32_t ignore_index, const float* lse, const float* dloss, T* dlogits) {
  const int64_t valid = valid_columns(vs);
#pragma omp parallel for schedule(static) if (parallel(N, vs))
  for (int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * vs.V_local;  // may alias drow: read-then-write per element
    T* drow = dlogits + n * vs.V_local;
    if (targets[n] == ignore_index) {
      std::fill(drow, drow + vs.V_local, from_f32<T>(0.0f));
      continue;
    }
    const float g = dloss[n], l = lse[n];
    const int64_t c = target_column(targets[n], vs, valid);
    const float target = c >= 0 ? to_f32(row[c]) : 0.0f;  // read before the row is overwritten
#pragma omp simd
    for (int64_t v = 0; v < valid; ++v)
      drow[v] = from_f32<T>(g * math::exp_approx(to_f32(row[v]) - l));
    std::fill(drow + valid, drow + vs.V_local, from_f32<T>(0.0f));
    // The target column in fp32 and rounded once (no double rounding in bf16).
    if (c >= 0) {
      float d = g * math::exp_approx(target - l);
      d -= g;
      drow[c] = from_f32<T>(d);
    }
  }
}
}  // namespace

void cross_entropy_row_max(const float* logits, int64_t N, const VocabSlice& vs, float* row_max) {
  row_max_impl(logits, N, vs, row_max);
}
void cross_entropy_row_max(const bf16_t* logits, int64_t N, const VocabSlice& vs, float* row_max) {
  row_max_impl(logits, N, vs, row_max);
}

void cross_entropy_sum_exp(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit) {
  sum_exp_impl(logits, targets, N, vs, row_max, sum_exp, target_logit);
}
void cross_entropy_sum_exp(const bf16_t* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, const float* row_max, float* sum_exp,
                           float* target_logit) {
  sum_exp_impl(logits, targets, N, vs, row_max, sum_exp, target_logit);
}

void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss) {
  for (int64_t n = 0; n < N; ++n)
    loss[n] =
        targets[n] == ignore_index ? 0.0f : std::log(sum_exp[n]) + row_max[n] - target_logit[n];
}

void cross_entropy_forward(const float* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse) {
  forward_impl(logits, targets, N, vs, ignore_index, loss, lse);
}
void cross_entropy_forward(const bf16_t* logits, const int32_t* targets, int64_t N,
                           const VocabSlice& vs, int32_t ignore_index, float* loss, float* lse) {
  forward_impl(logits, targets, N, vs, ignore_index, loss, lse);
}

void cross_entropy_backward(const float* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, float* dlogits) {
  backward_impl(logits, targets, N, vs, ignore_index, lse, dloss, dlogits);
}
void cross_entropy_backward(const bf16_t* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, bf16_t* dlogits) {
  backward_impl(logits, targets, N, vs, ignore_index, lse, dloss, dlogits);
}

}  // namespace megatron::kernels::cpu
