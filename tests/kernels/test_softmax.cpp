#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/reference/softmax.h"
#include "kernels/cpu/softmax.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::nan_vector;
using testing::random_vector;

TEST(Softmax, MatchesReference) {
  for (int64_t rows : {1, 3, 7}) {
    for (int64_t L : {1, 7, 33, 127, 1000}) {
      for (float scale : {1.0f, 0.125f, -0.5f}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << L << " scale " << scale);
        // Large logits: softmax must subtract the row max to stay finite.
        const auto x = random_vector(rows * L, uint32_t(rows * L), -200.0f, 200.0f);
        const auto dy = random_vector(rows * L, 2);
        auto y = nan_vector(rows * L), y_ref = y, dx = y, dx_ref = y;
        cpu::softmax_forward(x.data(), y.data(), rows, L, scale);
        ref::softmax_forward(x.data(), y_ref.data(), rows, L, scale);
        EXPECT_TRUE(all_close(y, y_ref, 1e-5));
        cpu::softmax_backward(y.data(), dy.data(), dx.data(), rows, L, scale);
        ref::softmax_backward(y.data(), dy.data(), dx_ref.data(), rows, L, scale);
        // dy - sum(dy * y) cancels for peaked rows: judge against |dy| ~ 1.
        EXPECT_TRUE(all_close(dx, dx_ref, 1e-5, 1.0));
      }
    }
  }
}

TEST(Softmax, RowsSumToOneAndMaskedEntriesAreZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t L = 5;
  const std::vector<float> x = {1.0f, -inf, 2.0f, -inf, 0.5f,   // two masked entries
                                -inf, -inf, -inf, -inf, -inf};  // everything masked
  std::vector<float> y(10);
  cpu::softmax_forward(x.data(), y.data(), 2, L, 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_NEAR(y[0] + y[2] + y[4], 1.0f, 1e-6f);
  EXPECT_NEAR(y[2] / y[0], std::exp(1.0f), 1e-5f);
  for (int64_t j = L; j < 2 * L; ++j) EXPECT_EQ(y[j], 0.0f);
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, L = 11;
  const float scale = 0.7f;
  const auto x = random_vector(rows * L, 1, -2.0f, 2.0f), w = random_vector(rows * L, 2);
  std::vector<float> y(rows * L);
  cpu::softmax_forward(x.data(), y.data(), rows, L, scale);
  auto dx = nan_vector(rows * L);
  cpu::softmax_backward(y.data(), w.data(), dx.data(), rows, L, scale);
  EXPECT_TRUE(testing::check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        std::vector<float> yy(rows * L);
        ref::softmax_forward(v.data(), yy.data(), rows, L, scale);
        return testing::weighted_sum(w, yy);
      },
      1e-2f, 2e-3, int(x.size())));
}

}  // namespace
}  // namespace megatron::kernels
