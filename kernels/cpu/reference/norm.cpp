#include "kernels/cpu/reference/norm.h"

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

}  // namespace megatron::kernels::ref
