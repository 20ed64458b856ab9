#include "kernels/cpu/reference/embedding.h"

#include <vector>

namespace megatron::kernels::ref {

void embedding_forward(const int32_t* ids, int64_t n_tokens, const float* table,
                       int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = ids[t] - vocab_start;
    const bool local = row >= 0 && row < vocab_rows;
    for (int64_t j = 0; j < dim; ++j) out[t * dim + j] = local ? table[row * dim + j] : 0.0f;
  }
}

void embedding_backward(const int32_t* ids, int64_t n_tokens, const float* dout,
                        int64_t vocab_start, int64_t vocab_rows, int64_t dim, float* dtable) {
  std::vector<double> acc(vocab_rows * dim, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = ids[t] - vocab_start;
    if (row < 0 || row >= vocab_rows) continue;
    for (int64_t j = 0; j < dim; ++j) acc[row * dim + j] += dout[t * dim + j];
  }
  for (int64_t i = 0; i < vocab_rows * dim; ++i) dtable[i] = float(dtable[i] + acc[i]);
}

}  // namespace megatron::kernels::ref
