#pragma once
// Helpers shared by the kernel tests: random data, tolerance comparison, and finite-difference
// gradient checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace megatron::kernels::testing {

inline std::vector<float> random_vector(int64_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> nan_vector(int64_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// |actual - expected| <= rtol * (|expected| + scale) elementwise, scale = max(max|expected|,
// min_scale): relative, with an absolute floor scaled to the data so entries that cancel to ~0
// are judged against the data's magnitude (min_scale: the inputs' magnitude, for outputs that
// are all cancellation). NaN anywhere (e.g. an output the kernel failed to write) fails.
inline ::testing::AssertionResult all_close(const std::vector<float>& actual,
                                            const std::vector<float>& expected, double rtol,
                                            double min_scale = 0.0) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " vs " << expected.size();
  double scale = min_scale;
  for (float e : expected) scale = std::max(scale, std::fabs(double(e)));
  int64_t bad = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    const double err = std::fabs(a - e) / (rtol * (std::fabs(e) + scale) + 1e-30);
    if (!(err <= 1.0)) {  // also catches NaN
      if (first < 0) first = int64_t(i);
      ++bad;
    }
    if (!std::isnan(err)) worst = std::max(worst, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ (rtol " << rtol << ", scale "
         << scale << "); first at " << first << ": " << actual[first] << " vs expected "
         << expected[first] << "; worst error/tolerance " << worst;
}

inline double weighted_sum(const std::vector<float>& w, const std::vector<float>& y) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i) s += double(w[i]) * y[i];
  return s;
}

// Central-difference check of `grad` = d loss / d x at `checks` random coordinates of x (all of
// them when x is smaller). loss(x) is evaluated in double on float inputs, so eps must be
// large enough (~1e-2) that float rounding of the forward stays below `tol`. The step actually
// taken, fl(x+eps) - fl(x-eps), is the denominator. Errors are relative to max|grad|.
inline ::testing::AssertionResult check_gradient(
    std::vector<float> x, const std::vector<float>& grad,
    const std::function<double(const std::vector<float>&)>& loss, float eps = 1e-2f,
    double tol = 2e-3, int checks = 24, uint32_t seed = 7) {
  if (x.size() != grad.size())
    return ::testing::AssertionFailure() << "size " << x.size() << " vs " << grad.size();
  double scale = 1e-6;
  for (float g : grad) scale = std::max(scale, std::fabs(double(g)));
  std::vector<size_t> coords(x.size());
  for (size_t i = 0; i < x.size(); ++i) coords[i] = i;
  if (int64_t(x.size()) > checks) {
    std::mt19937 rng(seed);
    std::shuffle(coords.begin(), coords.end(), rng);
    coords.resize(checks);
  }
  for (size_t k : coords) {
    const float orig = x[k];
    x[k] = orig + eps;
    const double up_x = x[k], up = loss(x);
    x[k] = orig - eps;
    const double down_x = x[k], down = loss(x);
    x[k] = orig;
    const double fd = (up - down) / (up_x - down_x);
    if (!(std::fabs(fd - grad[k]) <= tol * scale))
      return ::testing::AssertionFailure()
             << "coordinate " << k << ": analytic " << grad[k] << " vs finite difference " << fd
             << " (max|grad| " << scale << ", tol " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

// a + b elementwise (for "param grads accumulate" checks: expected = initial + fresh grad).
inline std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

}  // namespace megatron::kernels::testing
