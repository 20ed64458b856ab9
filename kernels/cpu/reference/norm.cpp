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

namespace {

// The positions in a token's fused QKV row of its query (part 0) or key (part 1) entries, in
// projection order (head-major), which is also the order of that part's weights.
std::vector<int64_t> qk_positions(const QkProjection& p, int part) {
  std::vector<int64_t> at;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t first = g * (p.q_slots + 2) + (part == 0 ? 0 : p.q_slots);
    const int64_t heads = part == 0 ? p.q_slots : 1;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < p.head_dim; ++j) at.push_back((first + h) * p.head_dim + j);
  }
  return at;
}

std::vector<float> gather(const float* row, const std::vector<int64_t>& at) {
  std::vector<float> out;
  for (int64_t i : at) out.push_back(row[i]);
  return out;
}

}  // namespace

void qk_projection_norm_forward(const float* x, const float* wq, const float* wk, float* y,
                                float* rstd, const QkProjection& p) {
  const int64_t row = p.row();
  std::copy(x, x + p.tokens * row, y);  // the value heads (the rest is overwritten)
  for (int part = 0; part < 2; ++part) {
    const std::vector<int64_t> at = qk_positions(p, part);
    const int64_t n = static_cast<int64_t>(at.size());
    for (int64_t t = 0; t < p.tokens; ++t) {
      const std::vector<float> xs = gather(x + t * row, at);
      std::vector<float> ys(at.size());
      rmsnorm_forward(xs.data(), part == 0 ? wq : wk, ys.data(), rstd + 2 * t + part, 1, n, p.eps);
      for (int64_t i = 0; i < n; ++i) y[t * row + at[static_cast<size_t>(i)]] = ys[i];
    }
  }
}

void qk_projection_norm_backward(const float* x, const float* wq, const float* wk,
                                 const float* rstd, const float* dy, float* dx, float* dwq,
                                 float* dwk, const QkProjection& p) {
  const int64_t row = p.row();
  std::copy(dy, dy + p.tokens * row, dx);
  for (int part = 0; part < 2; ++part) {
    const std::vector<int64_t> at = qk_positions(p, part);
    const int64_t n = static_cast<int64_t>(at.size());
    for (int64_t t = 0; t < p.tokens; ++t) {
      const std::vector<float> xs = gather(x + t * row, at), dys = gather(dy + t * row, at);
      std::vector<float> dxs(at.size());
      rmsnorm_backward(xs.data(), part == 0 ? wq : wk, rstd + 2 * t + part, dys.data(), dxs.data(),
                       part == 0 ? dwq : dwk, 1, n);
      for (int64_t i = 0; i < n; ++i) dx[t * row + at[static_cast<size_t>(i)]] = dxs[i];
    }
  }
}

}  // namespace megatron::kernels::ref
