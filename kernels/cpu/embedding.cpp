#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n_tokens, const T* table, int64_t vocab_start,
                       int64_t vocab_rows, int64_t dim, T* out) {
  for (int64_t t = 0; t < n_tokens; ++t)
    MT_CHECK(ids[t] >= 0, "embedding_forward: negative id ", ids[t], " at token ", t);
#pragma omp parallel for schedule(static) if (n_tokens * dim > detail::kParallelGrain)
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    T* o = out + t * dim;
    if (row >= 0 && row < vocab_rows) {
      std::memcpy(o, table + row * dim, sizeof(T) * dim);
    } else {
      std::fill(o, o + dim, T{});  // +0 in fp32 and bf16 alike
    }
  }
}

template <typename T>
void embedding_backward(const int32_t* ids, int64_t n_tokens, const T* dout, int64_t vocab_start,
                        int64_t vocab_rows, int64_t dim, float* dtable) {
  // Group the in-range tokens by row (ties kept in token order), then give each row to one
  // thread: every row sums its tokens in token order, so the result is the serial one for any
  // thread count, without atomics.
  std::vector<std::pair<int64_t, int64_t>> order;  // (row, token)
  order.reserve(n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {
    MT_CHECK(ids[t] >= 0, "embedding_backward: negative id ", ids[t], " at token ", t);
    const int64_t row = static_cast<int64_t>(ids[t]) - vocab_start;
    if (row >= 0 && row < vocab_rows) order.emplace_back(row, t);
  }
  std::sort(order.begin(), order.end());
  std::vector<int64_t> group_start;  // index in `order` where each distinct row begins
  for (size_t k = 0; k < order.size(); ++k)
    if (k == 0 || order[k].first != order[k - 1].first) group_start.push_back(int64_t(k));
  group_start.push_back(int64_t(order.size()));

  const int64_t groups = int64_t(group_start.size()) - 1;
#pragma omp parallel for schedule(dynamic, 16) if (n_tokens * dim > detail::kParallelGrain)
  for (int64_t g = 0; g < groups; ++g) {
    float* drow = dtable + order[group_start[g]].first * dim;
    for (int64_t k = group_start[g]; k < group_start[g + 1]; ++k) {
      const T* d = dout + order[k].second * dim;
#pragma omp simd
      for (int64_t j = 0; j < dim; ++j) drow[j] += detail::to_f32(d[j]);
    }
  }
}

#define MT_INSTANTIATE(T)                                                                          \
  template void embedding_forward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t, int64_t, \
                                     T*);                                                          \
  template void embedding_backward<T>(const int32_t*, int64_t, const T*, int64_t, int64_t,         \
                                      int64_t, float*);
MT_INSTANTIATE(float)
MT_INSTANTIATE(bf16_t)
#undef MT_INSTANTIATE

}  // namespace megatron::kernels::cpu
