#include "megatron/optimizer/topk_compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "megatron/core/error.h"

namespace megatron::optim {

int64_t topk_keep(int64_t n, double ratio) {
  MT_CHECK(n >= 0 && ratio > 0 && ratio <= 1, "topk_keep: n ", n, ", ratio ", ratio);
  const auto k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, std::min<int64_t>(n, 1), n);
}

void topk_compress(const float* grads, float* residual, int64_t n, int64_t k, int32_t* packed) {
  MT_CHECK(k >= 0 && k <= n && n <= INT32_MAX, "topk_compress: k ", k, " of ", n);
  for (int64_t i = 0; i < n; ++i) residual[i] += grads[i];
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  const auto larger = [&](int32_t a, int32_t b) {
    const float x = std::fabs(residual[a]), y = std::fabs(residual[b]);
    return x > y || (x == y && a < b);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
  std::sort(order.begin(), order.begin() + k);
  for (int64_t j = 0; j < k; ++j) {
    const int32_t i = order[static_cast<size_t>(j)];
    packed[j] = i;
    std::memcpy(&packed[k + j], &residual[i], sizeof(float));
    residual[i] = 0.0f;
  }
}

void topk_decompress(const int32_t* gathered, int64_t ranks, int64_t k, float* grads, int64_t n) {
  std::fill(grads, grads + n, 0.0f);
  for (int64_t r = 0; r < ranks; ++r) {
    const int32_t* set = gathered + r * 2 * k;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t i = set[j];
      MT_CHECK(i >= 0 && i < n, "topk_decompress: index ", i, " outside a bucket of ", n);
      float v;
      std::memcpy(&v, &set[k + j], sizeof(float));
      grads[i] += v;
    }
  }
}

}  // namespace megatron::optim
