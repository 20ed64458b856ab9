#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/reference/norm.h"
#include "megatron/core/dtype.h"
#include "tests/kernels/kernel_test_util.h"

namespace megatron::kernels {
namespace {

using testing::all_close;
using testing::check_gradient;
using testing::nan_vector;
using testing::plus;
using testing::random_vector;

const int64_t kRows[] = {1, 3, 7, 33};
const int64_t kDims[] = {1, 7, 33, 65, 127, 768};
constexpr float kEps = 1e-5f;

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] - b[i];
  return r;
}

TEST(LayerNorm, MatchesReference) {
  for (int64_t rows : kRows) {
    for (int64_t D : kDims) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << D);
      // An offset mean checks the variance does not cancel catastrophically.
      const auto x = random_vector(rows * D, uint32_t(rows * D), 2.0f, 5.0f);
      const auto w = random_vector(D, 1, 0.5f, 1.5f), b = random_vector(D, 2);
      const auto dy = random_vector(rows * D, 3);
      auto y = nan_vector(rows * D), y_ref = y;
      auto mean = nan_vector(rows), rstd = mean, mean_ref = mean, rstd_ref = mean;
      cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows,
                             D, kEps);
      ref::layernorm_forward(x.data(), w.data(), b.data(), y_ref.data(), mean_ref.data(),
                             rstd_ref.data(), rows, D, kEps);
      EXPECT_TRUE(all_close(y, y_ref, 2e-5));
      EXPECT_TRUE(all_close(mean, mean_ref, 1e-6));
      EXPECT_TRUE(all_close(rstd, rstd_ref, 2e-5));

      const auto dw0 = random_vector(D, 4), db0 = random_vector(D, 5);
      auto dx = nan_vector(rows * D), dx_ref = dx;
      auto dw = dw0, db = db0, dw_ref = dw0, db_ref = db0;
      cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                              dw.data(), db.data(), rows, D);
      ref::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(),
                              dx_ref.data(), dw_ref.data(), db_ref.data(), rows, D);
      // dx is pure cancellation for D = 1 (exactly 0): judge it against |dy * w| ~ 1.
      EXPECT_TRUE(all_close(dx, dx_ref, 2e-5, 1.0));
      EXPECT_TRUE(all_close(dw, dw_ref, 1e-5));
      EXPECT_TRUE(all_close(db, db_ref, 1e-6));
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulatesParamGrads) {
  const int64_t rows = 4, D = 9;
  const auto x = random_vector(rows * D, 1), w = random_vector(D, 2, 0.5f, 1.5f);
  const auto b = random_vector(D, 3), dyw = random_vector(rows * D, 4);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& ww,
                  const std::vector<float>& bb) {
    std::vector<float> y(rows * D), mean(rows), rstd(rows);
    ref::layernorm_forward(xx.data(), ww.data(), bb.data(), y.data(), mean.data(), rstd.data(),
                           rows, D, kEps);
    return testing::weighted_sum(dyw, y);
  };
  std::vector<float> y(rows * D), mean(rows), rstd(rows);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, D,
                         kEps);
  const auto dw0 = random_vector(D, 5), db0 = random_vector(D, 6);
  auto dx = nan_vector(rows * D), dw = dw0, db = db0;
  cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dyw.data(), dx.data(),
                          dw.data(), db.data(), rows, D);
  EXPECT_TRUE(check_gradient(x, dx, [&](const auto& v) { return loss(v, w, b); }));
  EXPECT_TRUE(check_gradient(w, minus(dw, dw0), [&](const auto& v) { return loss(x, v, b); }));
  EXPECT_TRUE(check_gradient(b, minus(db, db0), [&](const auto& v) { return loss(x, w, v); }));

  // A second backward adds the same gradient again: param grads accumulate, dx is rewritten.
  const auto dx_first = dx, dw_first = dw, db_first = db;
  cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dyw.data(), dx.data(),
                          dw.data(), db.data(), rows, D);
  EXPECT_EQ(dx, dx_first);
  EXPECT_TRUE(all_close(dw, plus(dw_first, minus(dw_first, dw0)), 1e-6));
  EXPECT_TRUE(all_close(db, plus(db_first, minus(db_first, db0)), 1e-6));
}

TEST(RmsNorm, MatchesReference) {
  for (int64_t rows : kRows) {
    for (int64_t D : kDims) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << D);
      const auto x = random_vector(rows * D, uint32_t(rows * D), -3.0f, 3.0f);
      const auto w = random_vector(D, 1, 0.5f, 1.5f), dy = random_vector(rows * D, 3);
      auto y = nan_vector(rows * D), y_ref = y, rstd = nan_vector(rows), rstd_ref = rstd;
      cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, D, kEps);
      ref::rmsnorm_forward(x.data(), w.data(), y_ref.data(), rstd_ref.data(), rows, D, kEps);
      EXPECT_TRUE(all_close(y, y_ref, 1e-5));
      EXPECT_TRUE(all_close(rstd, rstd_ref, 1e-5));

      const auto dw0 = random_vector(D, 4);
      auto dx = nan_vector(rows * D), dx_ref = dx, dw = dw0, dw_ref = dw0;
      cpu::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx.data(), dw.data(), rows,
                            D);
      ref::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx_ref.data(),
                            dw_ref.data(), rows, D);
      EXPECT_TRUE(all_close(dx, dx_ref, 1e-5, 1.0));
      EXPECT_TRUE(all_close(dw, dw_ref, 1e-5));
    }
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulatesParamGrads) {
  const int64_t rows = 4, D = 9;
  const auto x = random_vector(rows * D, 1), w = random_vector(D, 2, 0.5f, 1.5f);
  const auto dyw = random_vector(rows * D, 4);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& ww) {
    std::vector<float> y(rows * D), rstd(rows);
    ref::rmsnorm_forward(xx.data(), ww.data(), y.data(), rstd.data(), rows, D, kEps);
    return testing::weighted_sum(dyw, y);
  };
  std::vector<float> y(rows * D), rstd(rows);
  cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, D, kEps);
  const auto dw0 = random_vector(D, 5);
  auto dx = nan_vector(rows * D), dw = dw0;
  cpu::rmsnorm_backward(x.data(), w.data(), rstd.data(), dyw.data(), dx.data(), dw.data(), rows, D);
  EXPECT_TRUE(check_gradient(x, dx, [&](const auto& v) { return loss(v, w); }));
  EXPECT_TRUE(check_gradient(w, minus(dw, dw0), [&](const auto& v) { return loss(x, v); }));
}

TEST(Norm, ParamGradsIdenticalForAnyThreadCount) {
  const int64_t rows = 300, D = 200;
  const auto x = random_vector(rows * D, 1), w = random_vector(D, 2), b = random_vector(D, 3);
  const auto dy = random_vector(rows * D, 4);
  std::vector<float> y(rows * D), mean(rows), rstd(rows);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, D,
                         kEps);
  std::vector<float> first;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dx(rows * D), dw(D, 0.0f), db(D, 0.0f);
    cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                            dw.data(), db.data(), rows, D);
    std::vector<float> all = dx;
    all.insert(all.end(), dw.begin(), dw.end());
    all.insert(all.end(), db.begin(), db.end());
    if (first.empty()) first = all;
    EXPECT_EQ(all, first) << threads << " threads";
  }
  omp_set_num_threads(saved);
}

// Qwen3's q/k norm inside the fused QKV rows: every shape of groups x query heads per group,
// against the reference, with fp32 and bf16 storage.
TEST(QkRmsNorm, MatchesReference) {
  for (int64_t groups : {1, 3, 10}) {
    for (int64_t q_slots : {1, 2, 4}) {
      for (int64_t Dh : {8, 33, 128}) {
        SCOPED_TRACE(::testing::Message() << groups << " groups, " << q_slots << " q, Dh " << Dh);
        const int64_t n = groups * (q_slots + 2) * Dh, stats = groups * (q_slots + 1);
        const auto x = random_vector(n, uint32_t(n), -3.0f, 3.0f), dy = random_vector(n, 3);
        const auto wq = random_vector(Dh, 1, 0.5f, 1.5f), wk = random_vector(Dh, 2, 0.5f, 1.5f);
        auto y = nan_vector(n), y_ref = y, rstd = nan_vector(stats), rstd_ref = rstd;
        cpu::qk_rmsnorm_forward(x.data(), wq.data(), wk.data(), y.data(), rstd.data(), groups,
                                q_slots, Dh, kEps);
        ref::qk_rmsnorm_forward(x.data(), wq.data(), wk.data(), y_ref.data(), rstd_ref.data(),
                                groups, q_slots, Dh, kEps);
        EXPECT_TRUE(all_close(y, y_ref, 1e-5));
        EXPECT_TRUE(all_close(rstd, rstd_ref, 1e-5));
        const auto dwq0 = random_vector(Dh, 4), dwk0 = random_vector(Dh, 5);
        auto dx = nan_vector(n), dx_ref = dx, dwq = dwq0, dwk = dwk0, dwq_ref = dwq0,
             dwk_ref = dwk0;
        cpu::qk_rmsnorm_backward(x.data(), wq.data(), wk.data(), rstd.data(), dy.data(), dx.data(),
                                 dwq.data(), dwk.data(), groups, q_slots, Dh);
        ref::qk_rmsnorm_backward(x.data(), wq.data(), wk.data(), rstd.data(), dy.data(),
                                 dx_ref.data(), dwq_ref.data(), dwk_ref.data(), groups, q_slots,
                                 Dh);
        EXPECT_TRUE(all_close(dx, dx_ref, 1e-5, 1.0));
        EXPECT_TRUE(all_close(dwq, dwq_ref, 1e-5));
        EXPECT_TRUE(all_close(dwk, dwk_ref, 1e-5));
        // Value rows pass through untouched.
        for (int64_t g = 0; g < groups; ++g)
          for (int64_t j = 0; j < Dh; ++j) {
            const int64_t at = (g * (q_slots + 2) + q_slots + 1) * Dh + j;
            ASSERT_EQ(y[at], x[at]);
            ASSERT_EQ(dx[at], dy[at]);
          }
        // bf16 storage: the same values to bf16 rounding.
        std::vector<megatron::bf16_t> xb(n), yb(n), dyb(n), dxb(n);
        for (int64_t i = 0; i < n; ++i) {
          xb[i].bits = math::float_to_bf16_bits(x[i]);
          dyb[i].bits = math::float_to_bf16_bits(dy[i]);
        }
        std::vector<float> rstd_b(stats), dwq_b(Dh, 0.0f), dwk_b(Dh, 0.0f);
        cpu::qk_rmsnorm_forward(xb.data(), wq.data(), wk.data(), yb.data(), rstd_b.data(), groups,
                                q_slots, Dh, kEps);
        cpu::qk_rmsnorm_backward(xb.data(), wq.data(), wk.data(), rstd_b.data(), dyb.data(),
                                 dxb.data(), dwq_b.data(), dwk_b.data(), groups, q_slots, Dh);
        std::vector<float> yb32(n), dxb32(n);
        for (int64_t i = 0; i < n; ++i) {
          yb32[i] = math::bf16_bits_to_float(yb[i].bits);
          dxb32[i] = math::bf16_bits_to_float(dxb[i].bits);
        }
        EXPECT_TRUE(all_close(yb32, y_ref, 3e-2, 1.0));
        EXPECT_TRUE(all_close(dxb32, dx_ref, 3e-2, 1.0));
      }
    }
  }
}

TEST(QkRmsNorm, BackwardMatchesFiniteDifferences) {
  const int64_t groups = 3, q_slots = 2, Dh = 6, n = groups * (q_slots + 2) * Dh;
  const auto x = random_vector(n, 1), wq = random_vector(Dh, 2, 0.5f, 1.5f);
  const auto wk = random_vector(Dh, 3, 0.5f, 1.5f), dyw = random_vector(n, 4);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& q,
                  const std::vector<float>& k) {
    std::vector<float> y(n), rstd(groups * (q_slots + 1));
    ref::qk_rmsnorm_forward(xx.data(), q.data(), k.data(), y.data(), rstd.data(), groups, q_slots,
                            Dh, kEps);
    return testing::weighted_sum(dyw, y);
  };
  std::vector<float> y(n), rstd(groups * (q_slots + 1));
  cpu::qk_rmsnorm_forward(x.data(), wq.data(), wk.data(), y.data(), rstd.data(), groups, q_slots,
                          Dh, kEps);
  auto dx = nan_vector(n);
  std::vector<float> dwq(Dh, 0.0f), dwk(Dh, 0.0f);
  cpu::qk_rmsnorm_backward(x.data(), wq.data(), wk.data(), rstd.data(), dyw.data(), dx.data(),
                           dwq.data(), dwk.data(), groups, q_slots, Dh);
  EXPECT_TRUE(check_gradient(x, dx, [&](const auto& v) { return loss(v, wq, wk); }));
  EXPECT_TRUE(check_gradient(wq, dwq, [&](const auto& v) { return loss(x, v, wk); }));
  EXPECT_TRUE(check_gradient(wk, dwk, [&](const auto& v) { return loss(x, wq, v); }));
  // In place (dx aliasing dy), as the attention layer may run it: the same gradients.
  auto inplace = dyw;
  std::vector<float> dwq2(Dh, 0.0f), dwk2(Dh, 0.0f);
  cpu::qk_rmsnorm_backward(x.data(), wq.data(), wk.data(), rstd.data(), inplace.data(),
                           inplace.data(), dwq2.data(), dwk2.data(), groups, q_slots, Dh);
  EXPECT_EQ(inplace, dx);
  EXPECT_EQ(dwq2, dwq);
  EXPECT_EQ(dwk2, dwk);
}

// ---- whole-projection q/k RMSNorm (OLMo-2) ----

// The three steps of kernels/cpu/norm.h on one rank holding every group.
struct QkProjectionRun {
  std::vector<float> y, rstd, dx, dwq, dwk;
};
QkProjectionRun run_qk_projection(const std::vector<float>& x, const std::vector<float>& wq,
                                  const std::vector<float>& wk, const std::vector<float>& dy,
                                  const QkProjection& p) {
  QkProjectionRun r{nan_vector(x.size()), nan_vector(2 * p.tokens), nan_vector(x.size()),
                    std::vector<float>(wq.size(), 0.0f), std::vector<float>(wk.size(), 0.0f)};
  std::vector<float> sums(2 * p.tokens), dots(2 * p.tokens);
  cpu::qk_projection_sums<float>(x.data(), nullptr, wq.data(), wk.data(), sums.data(), p);
  cpu::qk_projection_norm_forward(x.data(), wq.data(), wk.data(), sums.data(), r.y.data(),
                                  r.rstd.data(), p);
  cpu::qk_projection_sums(x.data(), dy.data(), wq.data(), wk.data(), dots.data(), p);
  cpu::qk_projection_norm_backward(x.data(), wq.data(), wk.data(), r.rstd.data(), dots.data(),
                                   dy.data(), r.dx.data(), r.dwq.data(), r.dwk.data(), p);
  return r;
}

QkProjection qk_projection(int64_t tokens, int64_t groups, int64_t q_slots, int64_t Dh) {
  return QkProjection{tokens, groups, q_slots, Dh, groups * q_slots * Dh, groups * Dh, kEps};
}

TEST(QkProjectionNorm, MatchesReference) {
  for (const auto& [tokens, groups, q_slots, Dh] :
       std::vector<std::array<int64_t, 4>>{{1, 1, 1, 4}, {3, 2, 3, 8}, {17, 4, 2, 32}}) {
    SCOPED_TRACE(::testing::Message()
                 << tokens << " tokens, " << groups << "x" << q_slots << "x" << Dh);
    const QkProjection p = qk_projection(tokens, groups, q_slots, Dh);
    const int64_t n = tokens * p.row();
    const auto x = random_vector(n, uint32_t(n), -3.0f, 3.0f), dy = random_vector(n, 3);
    const auto wq = random_vector(p.local_q(), 1, 0.5f, 1.5f);
    const auto wk = random_vector(p.local_k(), 2, 0.5f, 1.5f);
    const QkProjectionRun got = run_qk_projection(x, wq, wk, dy, p);
    auto y = nan_vector(n), rstd = nan_vector(2 * tokens), dx = nan_vector(n);
    std::vector<float> dwq(wq.size(), 0.0f), dwk(wk.size(), 0.0f);
    ref::qk_projection_norm_forward(x.data(), wq.data(), wk.data(), y.data(), rstd.data(), p);
    ref::qk_projection_norm_backward(x.data(), wq.data(), wk.data(), rstd.data(), dy.data(),
                                     dx.data(), dwq.data(), dwk.data(), p);
    EXPECT_TRUE(all_close(got.y, y, 1e-5));
    EXPECT_TRUE(all_close(got.rstd, rstd, 1e-5));
    EXPECT_TRUE(all_close(got.dx, dx, 1e-5, 1.0));
    EXPECT_TRUE(all_close(got.dwq, dwq, 1e-5));
    EXPECT_TRUE(all_close(got.dwk, dwk, 1e-5));
    // The statistics span every head: not the per-head norm.
    std::vector<float> y_head(n), rstd_head(tokens * groups * (q_slots + 1));
    ref::qk_rmsnorm_forward(x.data(), wq.data(), wk.data(), y_head.data(), rstd_head.data(),
                            tokens * groups, q_slots, Dh, kEps);
    if (groups * q_slots > 1) {
      EXPECT_FALSE(all_close(got.y, y_head, 1e-3));
    }
  }
}

// Two "tensor-parallel ranks" holding half the groups each: their partial sums added give the
// one-rank result for each half (the layer adds them with an all-reduce).
TEST(QkProjectionNorm, SplitGroupsWithSummedStatisticsMatchTheWhole) {
  const int64_t tokens = 5, groups = 4, q_slots = 2, Dh = 8;
  const QkProjection whole = qk_projection(tokens, groups, q_slots, Dh);
  const int64_t n = tokens * whole.row();
  const auto x = random_vector(n, 7, -2.0f, 2.0f), dy = random_vector(n, 8);
  const auto wq = random_vector(whole.local_q(), 9, 0.5f, 1.5f);
  const auto wk = random_vector(whole.local_k(), 10, 0.5f, 1.5f);
  const QkProjectionRun full = run_qk_projection(x, wq, wk, dy, whole);
  QkProjection half = whole;
  half.groups = groups / 2;  // widths stay the whole projection's
  const int64_t hrow = half.row();
  std::vector<std::vector<float>> xs(2), dys(2), wqs(2), wks(2);
  for (int r = 0; r < 2; ++r) {
    for (int64_t t = 0; t < tokens; ++t) {
      const auto from = x.begin() + t * whole.row() + r * hrow;
      xs[r].insert(xs[r].end(), from, from + hrow);
      const auto dfrom = dy.begin() + t * whole.row() + r * hrow;
      dys[r].insert(dys[r].end(), dfrom, dfrom + hrow);
    }
    wqs[r].assign(wq.begin() + r * half.local_q(), wq.begin() + (r + 1) * half.local_q());
    wks[r].assign(wk.begin() + r * half.local_k(), wk.begin() + (r + 1) * half.local_k());
  }
  std::vector<float> sums(2 * tokens, 0.0f), dots(2 * tokens, 0.0f), part(2 * tokens);
  for (int r = 0; r < 2; ++r) {
    cpu::qk_projection_sums<float>(xs[r].data(), nullptr, wqs[r].data(), wks[r].data(), part.data(),
                                   half);
    for (int64_t i = 0; i < 2 * tokens; ++i) sums[i] += part[i];
    cpu::qk_projection_sums(xs[r].data(), dys[r].data(), wqs[r].data(), wks[r].data(), part.data(),
                            half);
    for (int64_t i = 0; i < 2 * tokens; ++i) dots[i] += part[i];
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> y(xs[r].size()), rstd(2 * tokens), dx(xs[r].size());
    std::vector<float> dwq(wqs[r].size(), 0.0f), dwk(wks[r].size(), 0.0f);
    cpu::qk_projection_norm_forward(xs[r].data(), wqs[r].data(), wks[r].data(), sums.data(),
                                    y.data(), rstd.data(), half);
    cpu::qk_projection_norm_backward(xs[r].data(), wqs[r].data(), wks[r].data(), rstd.data(),
                                     dots.data(), dys[r].data(), dx.data(), dwq.data(), dwk.data(),
                                     half);
    EXPECT_TRUE(all_close(rstd, full.rstd, 1e-6));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < hrow; ++i) {
        const int64_t at = t * whole.row() + r * hrow + i;
        ASSERT_NEAR(y[t * hrow + i], full.y[at], 1e-5);
        ASSERT_NEAR(dx[t * hrow + i], full.dx[at], 1e-5);
      }
    for (size_t i = 0; i < dwq.size(); ++i)
      ASSERT_NEAR(dwq[i], full.dwq[r * half.local_q() + static_cast<int64_t>(i)], 1e-5);
    for (size_t i = 0; i < dwk.size(); ++i)
      ASSERT_NEAR(dwk[i], full.dwk[r * half.local_k() + static_cast<int64_t>(i)], 1e-5);
  }
}

TEST(QkProjectionNorm, BackwardMatchesFiniteDifferences) {
  const QkProjection p = qk_projection(3, 2, 2, 4);
  const int64_t n = p.tokens * p.row();
  const auto x = random_vector(n, 11), wq = random_vector(p.local_q(), 12, 0.5f, 1.5f);
  const auto wk = random_vector(p.local_k(), 13, 0.5f, 1.5f), dyw = random_vector(n, 14);
  auto loss = [&](const std::vector<float>& xx, const std::vector<float>& q,
                  const std::vector<float>& k) {
    std::vector<float> y(n), rstd(2 * p.tokens);
    ref::qk_projection_norm_forward(xx.data(), q.data(), k.data(), y.data(), rstd.data(), p);
    return testing::weighted_sum(dyw, y);
  };
  const QkProjectionRun got = run_qk_projection(x, wq, wk, dyw, p);
  EXPECT_TRUE(check_gradient(x, got.dx, [&](const auto& v) { return loss(v, wq, wk); }));
  EXPECT_TRUE(check_gradient(wq, got.dwq, [&](const auto& v) { return loss(x, v, wk); }));
  EXPECT_TRUE(check_gradient(wk, got.dwk, [&](const auto& v) { return loss(x, wq, v); }));
  // In place (dx aliasing dy), as the attention layer runs it.
  auto inplace = dyw;
  std::vector<float> sums(2 * p.tokens), dots(2 * p.tokens), dwq(wq.size(), 0.0f),
      dwk(wk.size(), 0.0f);
  cpu::qk_projection_sums(x.data(), dyw.data(), wq.data(), wk.data(), dots.data(), p);
  cpu::qk_projection_norm_backward(x.data(), wq.data(), wk.data(), got.rstd.data(), dots.data(),
                                   inplace.data(), inplace.data(), dwq.data(), dwk.data(), p);
  EXPECT_EQ(inplace, got.dx);
  // bf16 storage: the same values to bf16 rounding.
  std::vector<megatron::bf16_t> xb(n), yb(n);
  for (int64_t i = 0; i < n; ++i) xb[i].bits = math::float_to_bf16_bits(x[i]);
  cpu::qk_projection_sums<megatron::bf16_t>(xb.data(), nullptr, wq.data(), wk.data(), sums.data(),
                                            p);
  std::vector<float> rstd_b(2 * p.tokens), yb32(n);
  cpu::qk_projection_norm_forward(xb.data(), wq.data(), wk.data(), sums.data(), yb.data(),
                                  rstd_b.data(), p);
  for (int64_t i = 0; i < n; ++i) yb32[i] = math::bf16_bits_to_float(yb[i].bits);
  EXPECT_TRUE(all_close(yb32, got.y, 3e-2, 1.0));
}

}  // namespace
}  // namespace megatron::kernels
