#include "kernels/common/numeric.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cross_entropy.h"

namespace megatron::kernels::cuda {
namespace {

using detail::from_float;
using detail::to_float;

constexpr int kThreads = 512;

int64_t valid_columns(const VocabSlice& vs) {
  const int64_t v = vs.valid_vocab - vs.vocab_start;
  return v < 0 ? 0 : (v > vs.V_local ? vs.V_local : v);
}

__device__ __forceinline__ int64_t target_column(int32_t target, int64_t vocab_start,
                                                 int64_t valid) {
  const int64_t c = int64_t(target) - vocab_start;
  return c >= 0 && c < valid ? c : -1;
}

template <typename T>
__device__ float row_max_of(const T* row, int64_t valid, float* scratch) {
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < valid; v += blockDim.x) mx = fmaxf(mx, to_float(row[v]));
  return detail::block_max(mx, scratch);
}

template <typename T>
__device__ float sum_exp_of(const T* row, int64_t valid, float mx, float* scratch) {
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < valid; v += blockDim.x)
    sum += math::exp_approx(to_float(row[v]) - mx);
  return detail::block_sum(sum, scratch);
}

template <typename T>
__global__ void row_max_kernel(const T* __restrict__ logits, int64_t V_local, int64_t valid,
                               float* __restrict__ row_max) {
  __shared__ float scratch[32];
  const float mx = row_max_of(logits + blockIdx.x * V_local, valid, scratch);
  if (threadIdx.x == 0) row_max[blockIdx.x] = mx;
}

template <typename T>
__global__ void sum_exp_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                               int64_t V_local, int64_t vocab_start, int64_t valid,
                               const float* __restrict__ row_max, float* __restrict__ sum_exp,
                               float* __restrict__ target_logit) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * V_local;
  const float sum = sum_exp_of(row, valid, row_max[n], scratch);
  if (threadIdx.x == 0) {
    sum_exp[n] = sum;
    const int64_t c = target_column(targets[n], vocab_start, valid);
    target_logit[n] = c >= 0 ? to_float(row[c]) : 0.0f;
  }
}

__global__ void loss_kernel(const int32_t* __restrict__ targets, int64_t N, int32_t ignore_index,
                            const float* __restrict__ row_max, const float* __restrict__ sum_exp,
                            const float* __restrict__ target_logit, float* __restrict__ loss) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  loss[n] = targets[n] == ignore_index ? 0.0f : logf(sum_exp[n]) + row_max[n] - target_logit[n];
}

__global__ void lse_kernel(const float* __restrict__ row_max, const float* __restrict__ sum_exp,
                           int64_t N, float* __restrict__ lse) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (n >= N) return;
  lse[n] = row_max[n] + logf(sum_exp[n]);
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ logits, const int32_t* __restrict__ targets,
                               int64_t V_local, int64_t vocab_start, int64_t valid,
                               int32_t ignore_index, float* __restrict__ loss,
                               float* __restrict__ lse) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * V_local;
  const float mx = row_max_of(row, valid, scratch);
  const float sum = sum_exp_of(row, valid, mx, scratch);
  if (threadIdx.x == 0) {
    const float log_sum = logf(sum);
    lse[n] = mx + log_sum;
    const int64_t c = target_column(targets[n], vocab_start, valid);
    const float target = c >= 0 ? to_float(row[c]) : 0.0f;
    loss[n] = targets[n] == ignore_index ? 0.0f : log_sum + mx - target;
  }
}

// Each element is read, then written, by the same thread: dlogits may alias logits.
template <typename T>
__global__ void backward_kernel(const T* logits, const int32_t* __restrict__ targets,
                                int64_t V_local, int64_t vocab_start, int64_t valid,
                                int32_t ignore_index, const float* __restrict__ lse,
                                const float* __restrict__ dloss, T* dlogits) {
  const int64_t n = blockIdx.x;
  const T* row = logits + n * V_local;
  T* drow = dlogits + n * V_local;
  const int32_t target = targets[n];
  if (target == ignore_index) {
    for (int64_t v = threadIdx.x; v < V_local; v += blockDim.x) drow[v] = from_float<T>(0.0f);
    return;
  }
  const float g = dloss[n], l = lse[n];
  const int64_t c = target_column(target, vocab_start, valid);
  for (int64_t v = threadIdx.x; v < V_local; v += blockDim.x) {
    float d = 0.0f;
    if (v < valid) {
      d = g * math::exp_approx(to_float(row[v]) - l);
      if (v == c) d -= g;
    }
    drow[v] = from_float<T>(d);
  }
}

void check_rows(int64_t N) {
  MT_CHECK(N <= 0x7fffffff, "cross_entropy (CUDA): ", N, " rows exceed the grid");
}

}  // namespace

template <typename T>
void cross_entropy_row_max(const T* logits, int64_t N, const VocabSlice& vs, float* row_max,
                           cudaStream_t stream) {
  if (N <= 0) return;
  check_rows(N);
  row_max_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, vs.V_local, valid_columns(vs),
                                                       row_max);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void cross_entropy_sum_exp(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                           const float* row_max, float* sum_exp, float* target_logit,
                           cudaStream_t stream) {
  if (N <= 0) return;
  check_rows(N);
  sum_exp_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, targets, vs.V_local, vs.vocab_start,
                                                       valid_columns(vs), row_max, sum_exp,
                                                       target_logit);
  MT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_loss(const int32_t* targets, int64_t N, int32_t ignore_index,
                        const float* row_max, const float* sum_exp, const float* target_logit,
                        float* loss, cudaStream_t stream) {
  if (N <= 0) return;
  loss_kernel<<<detail::grid_for(N, 256, 1 << 30), 256, 0, stream>>>(
      targets, N, ignore_index, row_max, sum_exp, target_logit, loss);
  MT_CUDA_LAUNCH_CHECK();
}

void cross_entropy_lse(const float* row_max, const float* sum_exp, int64_t N, float* lse,
                       cudaStream_t stream) {
  if (N <= 0) return;
  lse_kernel<<<detail::grid_for(N, 256, 1 << 30), 256, 0, stream>>>(row_max, sum_exp, N, lse);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, int64_t N, const VocabSlice& vs,
                           int32_t ignore_index, float* loss, float* lse, cudaStream_t stream) {
  if (N <= 0) return;
  check_rows(N);
  forward_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, targets, vs.V_local, vs.vocab_start,
                                                       valid_columns(vs), ignore_index, loss, lse);
  MT_CUDA_LAUNCH_CHECK();
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, int64_t N,
                            const VocabSlice& vs, int32_t ignore_index, const float* lse,
                            const float* dloss, T* dlogits, cudaStream_t stream) {
  if (N <= 0) return;
  check_rows(N);
  backward_kernel<<<unsigned(N), kThreads, 0, stream>>>(logits, targets, vs.V_local, vs.vocab_start,
                                                        valid_columns(vs), ignore_index, lse, dloss,
                                                        dlogits);
  MT_CUDA_LAUNCH_CHECK();
}

#define MT_INSTANTIATE(T)                                                                       \
  template void cross_entropy_row_max<T>(const T*, int64_t, const VocabSlice&, float*,          \
                                         cudaStream_t);                                         \
  template void cross_entropy_sum_exp<T>(const T*, const int32_t*, int64_t, const VocabSlice&,  \
                                         const float*, float*, float*, cudaStream_t);           \
  template void cross_entropy_forward<T>(const T*, const int32_t*, int64_t, const VocabSlice&,  \
                                         int32_t, float*, float*, cudaStream_t);                \
  template void cross_entropy_backward<T>(const T*, const int32_t*, int64_t, const VocabSlice&, \
                                          int32_t, const float*, const float*, T*, cudaStream_t);
MT_INSTANTIATE(float)
MT_INSTANTIATE(__nv_bfloat16)
MT_INSTANTIATE(__half)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cuda
