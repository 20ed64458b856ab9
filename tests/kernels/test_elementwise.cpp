#include <gtest/gtest.h>

#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reference/elementwise.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::check_gradient;
using testing::nan_vector;
using testing::random_vector;

// Sizes straddle the vector width and the single-thread cut-off of the parallel loops.
const int64_t kSizes[] = {1, 3, 7, 33, 127, 5000, 40000};

TEST(Elementwise, AddScaleFillMatchReference) {
  for (int64_t n : kSizes) {
    const auto a = random_vector(n, 1), b = random_vector(n, 2);
    auto out = nan_vector(n), out_ref = nan_vector(n);
    cpu::add(a.data(), b.data(), out.data(), n);
    ref::add(a.data(), b.data(), out_ref.data(), n);
    EXPECT_EQ(out, out_ref);
    cpu::add_inplace(out.data(), a.data(), n);
    ref::add_inplace(out_ref.data(), a.data(), n);
    EXPECT_EQ(out, out_ref);
    cpu::scale_inplace(out.data(), -0.37f, n);
    ref::scale_inplace(out_ref.data(), -0.37f, n);
    EXPECT_EQ(out, out_ref);
    cpu::fill(out.data(), 2.5f, n);
    ref::fill(out_ref.data(), 2.5f, n);
    EXPECT_EQ(out, out_ref);
  }
}

TEST(Gelu, MatchesReference) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, uint32_t(n), -6.0f, 6.0f), dy = random_vector(n, 9);
    auto y = nan_vector(n), y_ref = nan_vector(n), dx = nan_vector(n), dx_ref = nan_vector(n);
    cpu::gelu_forward(x.data(), y.data(), n);
    ref::gelu_forward(x.data(), y_ref.data(), n);
    EXPECT_TRUE(all_close(y, y_ref, 1e-6)) << n;
    cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
    ref::gelu_backward(x.data(), dy.data(), dx_ref.data(), n);
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-6)) << n;
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  const int64_t n = 65;
  const auto x = random_vector(n, 3, -4.0f, 4.0f), w = random_vector(n, 4);
  auto dx = nan_vector(n);
  cpu::gelu_backward(x.data(), w.data(), dx.data(), n);
  EXPECT_TRUE(check_gradient(x, dx, [&](const std::vector<float>& v) {
    std::vector<float> y(n);
    ref::gelu_forward(v.data(), y.data(), n);
    return testing::weighted_sum(w, y);
  }));
}

TEST(GeluExact, MatchesReferenceAndFiniteDifferences) {
  for (int64_t n : kSizes) {
    const auto x = random_vector(n, uint32_t(n + 1), -6.0f, 6.0f), dy = random_vector(n, 9);
    auto y = nan_vector(n), y_ref = nan_vector(n), dx = nan_vector(n), dx_ref = nan_vector(n);
    cpu::gelu_forward(x.data(), y.data(), n, math::Gelu::Erf);
    ref::gelu_erf_forward(x.data(), y_ref.data(), n);
    EXPECT_TRUE(all_close(y, y_ref, 1e-6)) << n;
    cpu::gelu_backward(x.data(), dy.data(), dx.data(), n, math::Gelu::Erf);
    ref::gelu_erf_backward(x.data(), dy.data(), dx_ref.data(), n);
    EXPECT_TRUE(all_close(dx, dx_ref, 1e-6)) << n;
  }
  const int64_t n = 65;
  const auto x = random_vector(n, 3, -4.0f, 4.0f), w = random_vector(n, 4);
  auto dx = nan_vector(n);
  cpu::gelu_backward(x.data(), w.data(), dx.data(), n, math::Gelu::Erf);
  EXPECT_TRUE(check_gradient(x, dx, [&](const std::vector<float>& v) {
    std::vector<float> y(n);
    ref::gelu_erf_forward(v.data(), y.data(), n);
    return testing::weighted_sum(w, y);
  }));
  // The two GELUs differ by up to ~1e-3 in the tails: a swapped kind would show.
  std::vector<float> e(n), t(n);
  cpu::gelu_forward(x.data(), e.data(), n, math::Gelu::Erf);
  cpu::gelu_forward(x.data(), t.data(), n, math::Gelu::Tanh);
  EXPECT_FALSE(all_close(e, t, 1e-6));
}

// Gated linear units: SwiGLU (silu gate) and GeGLU (tanh-GELU gate, Gemma's).
class Glu : public ::testing::TestWithParam<math::GluGate> {};

TEST_P(Glu, MatchesReference) {
  const math::GluGate gate = GetParam();
  for (int64_t rows : {1, 3, 7, 33}) {
    for (int64_t F : {1, 7, 65, 127}) {
      const auto x = random_vector(rows * 2 * F, uint32_t(rows * F), -5.0f, 5.0f);
      const auto dy = random_vector(rows * F, 2);
      auto y = nan_vector(rows * F), y_ref = y;
      auto dx = nan_vector(rows * 2 * F), dx_ref = dx;
      cpu::glu_forward(x.data(), y.data(), rows, F, gate);
      ref::glu_forward(x.data(), y_ref.data(), rows, F, gate);
      EXPECT_TRUE(all_close(y, y_ref, 1e-6)) << rows << "x" << F;
      cpu::glu_backward(x.data(), dy.data(), dx.data(), rows, F, gate);
      ref::glu_backward(x.data(), dy.data(), dx_ref.data(), rows, F, gate);
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-6)) << rows << "x" << F;
    }
  }
}

TEST_P(Glu, BackwardMatchesFiniteDifferences) {
  const math::GluGate gate = GetParam();
  const int64_t rows = 3, F = 7;
  const auto x = random_vector(rows * 2 * F, 5, -3.0f, 3.0f), w = random_vector(rows * F, 6);
  auto dx = nan_vector(rows * 2 * F);
  cpu::glu_backward(x.data(), w.data(), dx.data(), rows, F, gate);
  EXPECT_TRUE(check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        std::vector<float> y(rows * F);
        ref::glu_forward(v.data(), y.data(), rows, F, gate);
        return testing::weighted_sum(w, y);
      },
      1e-2f, 2e-3, int(x.size())));
}

INSTANTIATE_TEST_SUITE_P(Gates, Glu,
                         ::testing::Values(math::GluGate::Silu, math::GluGate::GeluTanh,
                                           math::GluGate::QuickGelu),
                         [](const auto& info) {
                           return info.param == math::GluGate::Silu       ? "swiglu"
                                  : info.param == math::GluGate::GeluTanh ? "geglu"
                                                                          : "quick_geglu";
                         });

// GPT-OSS's unit: quick GELU of min(gate, limit) times clamp(up, -limit, limit) + 1, against the
// reference (values on both sides of the clamps) and finite differences; the clamps and the
// offset change the result.
TEST(Glu, ClampedOffsetUnitMatchesReferenceAndFiniteDifferences) {
  const math::Glu glu{math::GluGate::QuickGelu, 1.5f, 1.0f};
  for (int64_t rows : {1, 5}) {
    for (int64_t F : {3, 65}) {
      const auto x = random_vector(rows * 2 * F, uint32_t(rows + F), -4.0f, 4.0f);
      const auto dy = random_vector(rows * F, 3);
      auto y = nan_vector(rows * F), y_ref = y;
      auto dx = nan_vector(rows * 2 * F), dx_ref = dx;
      cpu::glu_forward(x.data(), y.data(), rows, F, glu);
      ref::glu_forward(x.data(), y_ref.data(), rows, F, glu);
      EXPECT_TRUE(all_close(y, y_ref, 1e-6)) << rows << "x" << F;
      cpu::glu_backward(x.data(), dy.data(), dx.data(), rows, F, glu);
      ref::glu_backward(x.data(), dy.data(), dx_ref.data(), rows, F, glu);
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-6)) << rows << "x" << F;
      auto plain = nan_vector(rows * F);
      cpu::glu_forward(x.data(), plain.data(), rows, F, math::GluGate::QuickGelu);
      EXPECT_FALSE(all_close(y, plain, 1e-3));
    }
  }
  const int64_t rows = 3, F = 7;
  const auto x = random_vector(rows * 2 * F, 15, -3.0f, 3.0f), w = random_vector(rows * F, 16);
  auto dx = nan_vector(rows * 2 * F);
  cpu::glu_backward(x.data(), w.data(), dx.data(), rows, F, glu);
  int clamped = 0;
  for (float v : x) clamped += std::abs(v) > glu.limit;
  EXPECT_GT(clamped, 5);  // both sides of the clamps are checked
  EXPECT_TRUE(check_gradient(
      x, dx,
      [&](const std::vector<float>& v) {
        std::vector<float> y(rows * F);
        ref::glu_forward(v.data(), y.data(), rows, F, glu);
        return testing::weighted_sum(w, y);
      },
      1e-2f, 2e-3, int(x.size())));
}

// The two gates differ (the op honours its argument).
TEST(Glu, GatesDiffer) {
  const auto x = random_vector(2 * 16, 9, -3.0f, 3.0f);
  std::vector<float> s(16), g(16);
  cpu::glu_forward(x.data(), s.data(), 1, 16, math::GluGate::Silu);
  cpu::glu_forward(x.data(), g.data(), 1, 16, math::GluGate::GeluTanh);
  EXPECT_FALSE(all_close(s, g, 1e-3));
}

}  // namespace
}  // namespace megatron::kernels
