#include "kernels/cpu/reference/norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace megatron::kernels::ref {

void layernorm_forward(const float* x, const float* weight, const float* bias, float* y,
                       float* mean, float* rstd, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    double mu = 0.0, var = 0.0;
    for (int64_t j = 0; j < D; ++j) mu += xr[j];
    mu /= double(D);
    for (int64_t j = 0; j < D; ++j) var += (xr[j] - mu) * (xr[j] - mu);
    var /= double(D);
    const double rs = 1.0 / std::sqrt(var + eps);
    for (int64_t j = 0; j < D; ++j) y[r * D + j] = float((xr[j] - mu) * rs * weight[j] + bias[j]);
    mean[r] = float(mu);
    rstd[r] = float(rs);
  }
}

// y = xhat * w + b with xhat = (x - mean) * rstd:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
void layernorm_backward(const float* x, const float* weight, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dweight, float* dbias, int64_t rows,
                        int64_t D) {
  std::vector<double> dw(D, 0.0), db(D, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double mu = mean[r], rs = rstd[r];
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = (x[r * D + j] - mu) * rs, g = double(dy[r * D + j]) * weight[j];
      mean_g += g / double(D);
      mean_gx += g * xhat / double(D);
      dw[j] += double(dy[r * D + j]) * xhat;
      db[j] += dy[r * D + j];
    }
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = (x[r * D + j] - mu) * rs, g = double(dy[r * D + j]) * weight[j];
      dx[r * D + j] = float(rs * (g - mean_g - xhat * mean_gx));
    }
  }
  for (int64_t j = 0; j < D; ++j) {
    dweight[j] = float(dweight[j] + dw[j]);
    dbias[j] = float(dbias[j] + db[j]);
  }
}

void rmsnorm_forward(const float* x, const float* weight, float* y, float* rstd, int64_t rows,
                     int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int64_t j = 0; j < D; ++j) ms += double(x[r * D + j]) * x[r * D + j];
    const double rs = 1.0 / std::sqrt(ms / double(D) + eps);
    for (int64_t j = 0; j < D; ++j) y[r * D + j] = float(x[r * D + j] * rs * weight[j]);
    rstd[r] = float(rs);
  }
}

// y = xhat * w with xhat = x * rstd:  dx = rstd * (g - xhat * mean(g * xhat)), g = dy * w
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dy,
                      float* dx, float* dweight, int64_t rows, int64_t D) {
  std::vector<double> dw(D, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double rs = rstd[r];
    double mean_gx = 0.0;
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = x[r * D + j] * rs, g = double(dy[r * D + j]) * weight[j];
      mean_gx += g * xhat / double(D);
      dw[j] += double(dy[r * D + j]) * xhat;
    }
    for (int64_t j = 0; j < D; ++j) {
      const double xhat = x[r * D + j] * rs, g = double(dy[r * D + j]) * weight[j];
      dx[r * D + j] = float(rs * (g - xhat * mean_gx));
    }
  }
  for (int64_t j = 0; j < D; ++j) dweight[j] = float(dweight[j] + dw[j]);
}

namespace {

// Calls row(at, stat, is_query) for every query and key row of [groups, q_slots + 2, Dh] (at: its
// first element, stat: its statistic's index) and value(at) for every value row.
template <typename Row, typename Value>
void walk_qk_rows(int64_t groups, int64_t q_slots, int64_t Dh, Row row, Value value) {
  const int64_t slots = q_slots + 2;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t slot = 0; slot < slots; ++slot) {
      const int64_t at = (g * slots + slot) * Dh;
      if (slot == q_slots + 1)
        value(at);
      else
        row(at, g * (q_slots + 1) + slot, slot < q_slots);
    }
}

}  // namespace

void qk_rmsnorm_forward(const float* x, const float* wq, const float* wk, float* y, float* rstd,
                        int64_t groups, int64_t q_slots, int64_t Dh, float eps) {
  walk_qk_rows(
      groups, q_slots, Dh,
      [&](int64_t at, int64_t stat, bool query) {
        rmsnorm_forward(x + at, query ? wq : wk, y + at, rstd + stat, 1, Dh, eps);
      },
      [&](int64_t at) { std::copy(x + at, x + at + Dh, y + at); });
}

void qk_rmsnorm_backward(const float* x, const float* wq, const float* wk, const float* rstd,
                         const float* dy, float* dx, float* dwq, float* dwk, int64_t groups,
                         int64_t q_slots, int64_t Dh) {
  walk_qk_rows(
      groups, q_slots, Dh,
      [&](int64_t at, int64_t stat, bool query) {
        rmsnorm_backward(x + at, query ? wq : wk, rstd + stat, dy + at, dx + at, query ? dwq : dwk,
                         1, Dh);
      },
      [&](int64_t at) { std::copy(dy + at, dy + at + Dh, dx + at); });
}

}  // namespace megatron::kernels::ref
