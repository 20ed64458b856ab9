#include "kernels/cpu/reference/moe_rows.h"

namespace megatron::kernels::ref {

void gather_rows(const void* src, const int32_t* index, int64_t n, size_t row_bytes, void* out) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* o = static_cast<unsigned char*>(out);
  for (int64_t i = 0; i < n; ++i)
    for (size_t b = 0; b < row_bytes; ++b)
      o[i * row_bytes + b] = index[i] < 0 ? 0 : s[static_cast<size_t>(index[i]) * row_bytes + b];
}

void scatter_rows(const void* src, const int32_t* index, int64_t n, size_t row_bytes, void* out) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* o = static_cast<unsigned char*>(out);
  for (int64_t i = 0; i < n; ++i)
    if (index[i] >= 0)
      for (size_t b = 0; b < row_bytes; ++b)
        o[static_cast<size_t>(index[i]) * row_bytes + b] = s[i * row_bytes + b];
}

void moe_combine(const float* rows, const int32_t* index, const float* gates, int64_t tokens,
                 int64_t k, int64_t dim, float* out) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t d = 0; d < dim; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t slot = t * k + j, r = index ? index[slot] : slot;
        if (r >= 0) acc += (gates ? double(gates[slot]) : 1.0) * rows[r * dim + d];
      }
      out[t * dim + d] = float(acc);
    }
}

void moe_combine_backward(const float* rows, const float* gates, const float* dy, int64_t tokens,
                          int64_t k, int64_t dim, float* d_rows, float* d_gates) {
  for (int64_t i = 0; i < tokens * k; ++i) {
    double dot = 0;
    for (int64_t d = 0; d < dim; ++d) {
      dot += double(dy[(i / k) * dim + d]) * rows[i * dim + d];
      d_rows[i * dim + d] = float(double(gates[i]) * dy[(i / k) * dim + d]);
    }
    d_gates[i] = float(dot);
  }
}

}  // namespace megatron::kernels::ref
