#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/optim.h"
#include "kernels/cpu/reference/optim.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::random_vector;

math::AdamWParams params_for_step(int step, float lr, float b1, float b2, float eps, float wd) {
  return {lr, b1, b2, eps, wd, 1.0f - std::pow(b1, float(step)), 1.0f - std::pow(b2, float(step))};
}

// Two steps worked by hand (lr 0.1, betas 0.9/0.999, eps 1e-8, weight decay 0.01, p0 = 1):
// step 1, g = 0.5:   m = 0.05, v = 2.5e-4, m^ = 0.5, v^ = 0.25
//                    p = 1 - 0.1 * (0.5 / (0.5 + 1e-8) + 0.01 * 1)             = 0.899000002
// step 2, g = -0.25: m = 0.9 * 0.05 - 0.025 = 0.02, v = 0.999 * 2.5e-4 + 6.25e-5 = 3.1225e-4
//                    m^ = 0.02 / 0.19 = 0.1052632, v^ = 3.1225e-4 / 0.001999 = 0.1562031
//                    p = 0.899000002 - 0.1 * (0.1052632 / 0.3952254 + 0.00899) = 0.8714673
// The moments carry fp32's rounding of the betas (1 - 0.999f = 9.99987e-4, a 1.3e-5 relative
// error) which the bias correction cancels again in the parameter.
TEST(AdamW, TwoStepsMatchHandComputation) {
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g1 = 0.5f, g2 = -0.25f;
  cpu::adamw_step(&p, &g1, &m, &v, 1, params_for_step(1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f));
  EXPECT_NEAR(m, 0.05f, 0.05f * 1e-6f);
  EXPECT_NEAR(v, 2.5e-4f, 2.5e-4f * 2e-5f);
  EXPECT_NEAR(p, 0.899000002f, 1e-6f);
  cpu::adamw_step(&p, &g2, &m, &v, 1, params_for_step(2, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f));
  EXPECT_NEAR(m, 0.02f, 0.02f * 2e-6f);
  EXPECT_NEAR(v, 3.1225e-4f, 3.1225e-4f * 2e-5f);
  EXPECT_NEAR(p, 0.8714673f, 1e-6f);
}

TEST(AdamW, MatchesReferenceOverSteps) {
  for (int64_t n : {1, 7, 33, 5000, 40000}) {
    auto p = random_vector(n, 1), m = std::vector<float>(n, 0.0f), v = m;
    auto p_ref = p, m_ref = m, v_ref = v;
    for (int step = 1; step <= 3; ++step) {
      const auto g = random_vector(n, uint32_t(10 + step));
      const auto hp = params_for_step(step, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
      cpu::adamw_step(p.data(), g.data(), m.data(), v.data(), n, hp);
      ref::adamw_step(p_ref.data(), g.data(), m_ref.data(), v_ref.data(), n, hp);
    }
    EXPECT_TRUE(all_close(p, p_ref, 1e-6)) << n;
    EXPECT_TRUE(all_close(m, m_ref, 1e-6)) << n;
    EXPECT_TRUE(all_close(v, v_ref, 1e-6)) << n;
  }
}

TEST(SumSquares, MatchesDoubleLoop) {
  for (int64_t n : {0, 1, 7, 33, 1000, 100000}) {
    const auto x = random_vector(n, uint32_t(n) + 1, -3.0f, 3.0f);
    double expected = 0.0;
    for (float e : x) expected += double(e) * e;
    EXPECT_NEAR(cpu::sum_squares(x.data(), n), expected, 1e-12 * (expected + 1.0)) << n;
    EXPECT_NEAR(ref::sum_squares(x.data(), n), expected, 1e-12 * (expected + 1.0)) << n;
  }
}

TEST(SumSquares, IdenticalForAnyThreadCount) {
  const auto x = random_vector(300001, 3);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = cpu::sum_squares(x.data(), int64_t(x.size()));
  for (int threads : {2, 3, 4}) {
    omp_set_num_threads(threads);
    EXPECT_EQ(cpu::sum_squares(x.data(), int64_t(x.size())), one) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace megatron::kernels
