#include <gtest/gtest.h>
#include <omp.h>

#include <random>
#include <vector>

#include "kernels/cpu/embedding.h"
#include "kernels/cpu/reference/embedding.h"
#include "megatron/core/error.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

// Ids over the whole vocabulary (with repeats); the local table holds rows
// [vocab_start, vocab_start + vocab_rows), the others must give zero rows and no gradient.
std::vector<int32_t> random_ids(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

struct Case {
  int64_t tokens, dim, vocab_start, vocab_rows;
  int32_t vocab;
};
const Case kCases[] = {{1, 1, 0, 5, 5},      {33, 7, 0, 11, 11}, {127, 65, 10, 13, 40},
                       {65, 33, 27, 13, 40}, {200, 3, 0, 1, 3},  {3000, 9, 100, 50, 400}};

TEST(Embedding, ForwardMatchesReference) {
  for (const Case& c : kCases) {
    const auto ids = random_ids(c.tokens, c.vocab, uint32_t(c.tokens));
    const auto table = random_vector(c.vocab_rows * c.dim, 1);
    auto out = testing::nan_vector(c.tokens * c.dim), out_ref = out;
    cpu::embedding_forward(ids.data(), c.tokens, table.data(), c.vocab_start, c.vocab_rows, c.dim,
                           out.data());
    ref::embedding_forward(ids.data(), c.tokens, table.data(), c.vocab_start, c.vocab_rows, c.dim,
                           out_ref.data());
    EXPECT_EQ(out, out_ref);
  }
}

TEST(Embedding, BackwardMatchesReferenceAndAccumulates) {
  for (const Case& c : kCases) {
    const auto ids = random_ids(c.tokens, c.vocab, uint32_t(c.tokens) + 1);
    const auto dout = random_vector(c.tokens * c.dim, 2);
    const auto initial = random_vector(c.vocab_rows * c.dim, 3);
    auto dtable = initial, dtable_ref = initial;
    cpu::embedding_backward(ids.data(), c.tokens, dout.data(), c.vocab_start, c.vocab_rows, c.dim,
                            dtable.data());
    ref::embedding_backward(ids.data(), c.tokens, dout.data(), c.vocab_start, c.vocab_rows, c.dim,
                            dtable_ref.data());
    EXPECT_TRUE(all_close(dtable, dtable_ref, 1e-6));
    // Rows no token hit keep their old value exactly.
    std::vector<bool> hit(c.vocab_rows, false);
    for (int32_t id : ids)
      if (id >= c.vocab_start && id < c.vocab_start + c.vocab_rows) hit[id - c.vocab_start] = true;
    for (int64_t r = 0; r < c.vocab_rows; ++r) {
      if (hit[r]) continue;
      for (int64_t j = 0; j < c.dim; ++j) EXPECT_EQ(dtable[r * c.dim + j], initial[r * c.dim + j]);
    }
  }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 9, dim = 4, vocab_start = 2, rows = 5;
  const auto ids = random_ids(tokens, 8, 4);
  const auto table = random_vector(rows * dim, 5), w = random_vector(tokens * dim, 6);
  const auto initial = random_vector(rows * dim, 7);
  auto dtable = initial;
  cpu::embedding_backward(ids.data(), tokens, w.data(), vocab_start, rows, dim, dtable.data());
  std::vector<float> fresh(rows * dim);
  for (size_t i = 0; i < fresh.size(); ++i) fresh[i] = dtable[i] - initial[i];
  EXPECT_TRUE(testing::check_gradient(
      table, fresh,
      [&](const std::vector<float>& t) {
        std::vector<float> out(tokens * dim);
        ref::embedding_forward(ids.data(), tokens, t.data(), vocab_start, rows, dim, out.data());
        return testing::weighted_sum(w, out);
      },
      1e-2f, 1e-4, int(table.size())));
}

TEST(Embedding, BackwardIsIdenticalForAnyThreadCount) {
  const int64_t tokens = 4096, dim = 16, rows = 64;
  const auto ids = random_ids(tokens, int32_t(rows), 8);  // many repeats per row
  const auto dout = random_vector(tokens * dim, 9);
  std::vector<float> first;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3, 4}) {
    omp_set_num_threads(threads);
    std::vector<float> dtable(rows * dim, 0.0f);
    cpu::embedding_backward(ids.data(), tokens, dout.data(), 0, rows, dim, dtable.data());
    if (first.empty()) first = dtable;
    EXPECT_EQ(dtable, first) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

TEST(Embedding, RejectsNegativeIds) {
  const std::vector<int32_t> ids = {1, -1};
  std::vector<float> table(4, 0.0f), out(4);
  EXPECT_THROW(cpu::embedding_forward(ids.data(), 2, table.data(), 0, 2, 2, out.data()),
               megatron::Error);
  EXPECT_THROW(cpu::embedding_backward(ids.data(), 2, out.data(), 0, 2, 2, table.data()),
               megatron::Error);
}

}  // namespace
}  // namespace megatron::kernels
