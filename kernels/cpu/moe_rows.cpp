#include "kernels/cpu/moe_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernel_util.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

// Every index is -1 or a row of [0, rows): checked before any row moves, so an error leaves the
// output untouched.
void check_indices(const char* op, const int32_t* index, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i)
    MT_CHECK(index[i] >= -1 && index[i] < rows, op, ": index ", index[i], " at ", i,
             " outside [0, ", rows, ") (and not -1)");
}

}  // namespace

void gather_rows(const void* src, int64_t src_rows, const int32_t* index, int64_t n,
                 size_t row_bytes, void* out) {
  check_indices("gather_rows", index, n, src_rows);
  const char* s = static_cast<const char*>(src);
  char* o = static_cast<char*>(out);
  const int64_t bytes = n * static_cast<int64_t>(row_bytes);
#pragma omp parallel for schedule(static) if (bytes > 4 * detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    char* row = o + i * row_bytes;
    if (index[i] < 0)
      std::memset(row, 0, row_bytes);  // +0 in every float type
    else
      std::memcpy(row, s + static_cast<size_t>(index[i]) * row_bytes, row_bytes);
  }
}

void scatter_rows(const void* src, const int32_t* index, int64_t n, int64_t out_rows,
                  size_t row_bytes, void* out) {
  check_indices("scatter_rows", index, n, out_rows);
  std::vector<uint8_t> taken(static_cast<size_t>(out_rows), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0) continue;
    MT_CHECK(!taken[static_cast<size_t>(index[i])], "scatter_rows: row ", index[i],
             " is the target of more than one source row (the second at ", i, ")");
    taken[static_cast<size_t>(index[i])] = 1;
  }
  const char* s = static_cast<const char*>(src);
  char* o = static_cast<char*>(out);
  const int64_t bytes = n * static_cast<int64_t>(row_bytes);
#pragma omp parallel for schedule(static) if (bytes > 4 * detail::kParallelGrain)
  for (int64_t i = 0; i < n; ++i)
    if (index[i] >= 0)
      std::memcpy(o + static_cast<size_t>(index[i]) * row_bytes, s + i * row_bytes, row_bytes);
}

void moe_combine(const float* rows, int64_t n_rows, const int32_t* index, const float* gates,
                 int64_t tokens, int64_t k, int64_t dim, float* out) {
  if (tokens == 0) return;  // (an empty index may come as a null pointer)
  if (index != nullptr) check_indices("moe_combine", index, tokens * k, n_rows);
  MT_CHECK(index != nullptr || n_rows == tokens * k, "moe_combine: ", n_rows,
           " rows without an index for ", tokens, " tokens x ", k, " slots");
#pragma omp parallel for schedule(static) if (tokens * k * dim > detail::kParallelGrain)
  for (int64_t t = 0; t < tokens; ++t) {
    float* y = out + t * dim;
    std::fill(y, y + dim, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t slot = t * k + j;
      const int64_t r = index != nullptr ? index[slot] : slot;
      if (r < 0) continue;
      const float* x = rows + r * dim;
      if (gates == nullptr) {
        for (int64_t d = 0; d < dim; ++d) y[d] += x[d];
      } else {
        const float g = gates[slot];
        for (int64_t d = 0; d < dim; ++d) y[d] += g * x[d];
      }
    }
  }
}

void moe_combine_backward(const float* rows, const float* gates, const float* dy, int64_t tokens,
                          int64_t k, int64_t dim, float* d_rows, float* d_gates) {
#pragma omp parallel for schedule(static) if (tokens * k * dim > detail::kParallelGrain)
  for (int64_t i = 0; i < tokens * k; ++i) {
    const float* g_out = dy + (i / k) * dim;
    const float* x = rows + i * dim;
    float* dr = d_rows + i * dim;
    const float g = gates[i];
    double dot = 0;  // in order, in fp64: the gate's gradient sums dim products
    for (int64_t d = 0; d < dim; ++d) {
      dot += static_cast<double>(g_out[d]) * x[d];
      dr[d] = g * g_out[d];
    }
    d_gates[i] = static_cast<float>(dot);
  }
}

}  // namespace megatron::kernels::cpu
