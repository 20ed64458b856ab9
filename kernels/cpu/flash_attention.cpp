#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/common/numeric.h"
#include "kernels/cpu/attention_common.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernel_util.h"
#include "megatron/core/error.h"

namespace megatron::kernels::cpu {
namespace {

using namespace attention_detail;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows x key columns per tile: the per-thread scratch is kRows x kCols scores.
constexpr int64_t kRows = 64;
constexpr int64_t kCols = 128;

// Number of visible columns [c0, c0 + lim) of row i in a tile starting at key c0 (causal
// clips at i); key_mask holes and the sliding window's start are applied separately.
int64_t visible(int64_t i, int64_t c0, int64_t cols, bool causal) {
  if (!causal) return cols;
  return std::clamp<int64_t>(i + 1 - c0, 0, cols);
}

// The first key tile rows [r0, ..) need: tiles wholly before every row's sliding window hold
// only masked keys.
int64_t first_tile(const AttentionOptions& opt, int64_t r0) {
  return first_key(opt, r0) / kCols * kCols;
}

}  // namespace

void flash_attention_forward(const AttentionShape& shape, const AttentionOptions& opt,
                             const float* qkv, float* out, float* lse) {
  check_shape("flash_attention", shape, opt);
  const Layout L(shape);
  const int64_t S = L.S, Dh = L.Dh;
  if (S == 0 || L.B == 0 || L.H == 0) return;
  const bool dropout = opt.dropout_p > 0.0f;
  const float p = opt.dropout_p, keep_scale = 1.0f / (1.0f - p);
  const int64_t pairs = L.B * L.H;
#pragma omp parallel if (pairs > 1)
  {
    std::vector<float> sc(kRows * kCols), m(kRows), l(kRows), uniforms(kCols);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / L.H, h = bh % L.H, g = h / L.heads_per_group;
      const float* Q = qkv + L.q(b, h);
      const float* K = qkv + L.k(b, g);
      const float* V = qkv + L.v(b, g);
      float* O = out + L.out(b, h);
      float* lse_row = lse + bh * S;
      const uint8_t* km = opt.key_mask ? opt.key_mask + b * S : nullptr;
      const int32_t* seg = opt.segment_ids ? opt.segment_ids + b * S : nullptr;
      const uint64_t base = dropout_base(shape, b, h);
      for (int64_t r0 = 0; r0 < S; r0 += kRows) {
        const int64_t r1 = std::min(r0 + kRows, S), rows = r1 - r0;
        const int64_t kend = opt.causal ? r1 : S;
        std::fill(m.begin(), m.end(), kNegInf);
        std::fill(l.begin(), l.end(), 0.0f);
        for (int64_t i = r0; i < r1; ++i) std::fill(O + i * L.ld_out, O + i * L.ld_out + Dh, 0.0f);
        for (int64_t c0 = first_tile(opt, r0); c0 < kend; c0 += kCols) {
          const int64_t cols = std::min(kCols, kend - c0);
          gemm(false, true, rows, cols, Dh, opt.scale, Q + r0 * L.ld_qkv, L.ld_qkv,
               K + c0 * L.ld_qkv, L.ld_qkv, 0.0f, sc.data(), kCols);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = r0 + r;
            float* row = sc.data() + r * kCols;
            const int64_t lim = visible(i, c0, cols, opt.causal);
            for (int64_t j = 0; j < std::min(first_key(opt, i) - c0, lim); ++j) row[j] = kNegInf;
            if (km) {
#pragma omp simd
              for (int64_t j = 0; j < lim; ++j) row[j] = km[c0 + j] ? row[j] : kNegInf;
            }
            if (seg) {
              const int32_t own = seg[i];
#pragma omp simd
              for (int64_t j = 0; j < lim; ++j) row[j] = seg[c0 + j] == own ? row[j] : kNegInf;
            }
            const float mx = std::max(m[r], detail::max_of(row, lim));
            float* o = O + i * L.ld_out;
            if (mx == kNegInf) {  // nothing visible yet: the row stays empty
              std::fill(row, row + cols, 0.0f);
              continue;
            }
            const float alpha = m[r] == kNegInf ? 0.0f : math::exp_approx(m[r] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < lim; ++j) {
              row[j] = math::exp_approx(row[j] - mx);
              sum += row[j];
            }
            std::fill(row + lim, row + cols, 0.0f);
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
            if (alpha != 1.0f) {
#pragma omp simd
              for (int64_t d = 0; d < Dh; ++d) o[d] *= alpha;
            }
            if (dropout) {
              detail::fill_uniform(opt.seed, opt.stream, base + uint64_t(i * S + c0), lim,
                                   uniforms.data());
#pragma omp simd
              for (int64_t j = 0; j < lim; ++j)
                row[j] = uniforms[j] >= p ? row[j] * keep_scale : 0.0f;
            }
          }
          gemm(false, false, rows, Dh, cols, 1.0f, sc.data(), kCols, V + c0 * L.ld_qkv, L.ld_qkv,
               1.0f, O + r0 * L.ld_out, L.ld_out);
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = r0 + r;
          float* o = O + i * L.ld_out;
          if (l[r] > 0.0f) {
            const float inv = 1.0f / l[r];
#pragma omp simd
            for (int64_t d = 0; d < Dh; ++d) o[d] *= inv;
            lse_row[i] = m[r] + std::log(l[r]);
          } else {
            std::fill(o, o + Dh, 0.0f);
            lse_row[i] = kNegInf;
          }
        }
      }
    }
  }
}

void flash_attention_backward(const AttentionShape& shape, const AttentionOptions& opt,
                              const float* qkv, const float* out, const float* lse,
                              const float* dout, float* dqkv) {
  check_shape("flash_attention", shape, opt);
  const Layout L(shape);
  const int64_t S = L.S, Dh = L.Dh;
  if (S == 0 || L.B == 0 || L.H == 0) return;
  const bool dropout = opt.dropout_p > 0.0f;
  const float p = opt.dropout_p, keep_scale = 1.0f / (1.0f - p);
  const int64_t groups = L.B * L.G;
  // One (b, g) per iteration: the group's heads add into its dK and dV in head order (no
  // atomics, independent of the thread count), as the unfused backward.
#pragma omp parallel if (groups > 1)
  {
    std::vector<float> P(kRows * kCols), pv(kRows * kCols), ds(kRows * kCols);
    std::vector<float> D(kRows), uniforms(kCols);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < groups; ++bg) {
      const int64_t b = bg / L.G, g = bg % L.G;
      const float* K = qkv + L.k(b, g);
      const float* V = qkv + L.v(b, g);
      float* dK = dqkv + L.k(b, g);
      float* dV = dqkv + L.v(b, g);
      const uint8_t* km = opt.key_mask ? opt.key_mask + b * S : nullptr;
      const int32_t* seg = opt.segment_ids ? opt.segment_ids + b * S : nullptr;
      for (int64_t s = 0; s < S; ++s) {
        std::fill(dK + s * L.ld_qkv, dK + s * L.ld_qkv + Dh, 0.0f);
        std::fill(dV + s * L.ld_qkv, dV + s * L.ld_qkv + Dh, 0.0f);
      }
      for (int64_t h = g * L.heads_per_group; h < (g + 1) * L.heads_per_group; ++h) {
        const float* Q = qkv + L.q(b, h);
        float* dQ = dqkv + L.q(b, h);
        const float* O = out + L.out(b, h);
        const float* dO = dout + L.out(b, h);
        const float* lse_row = lse + (b * L.H + h) * S;
        const uint64_t base = dropout_base(shape, b, h);
        for (int64_t r0 = 0; r0 < S; r0 += kRows) {
          const int64_t r1 = std::min(r0 + kRows, S), rows = r1 - r0;
          const int64_t kend = opt.causal ? r1 : S;
          for (int64_t r = 0; r < rows; ++r) {
            const float* o = O + (r0 + r) * L.ld_out;
            const float* d_o = dO + (r0 + r) * L.ld_out;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < Dh; ++d) dot += o[d] * d_o[d];
            D[r] = dot;
            std::fill(dQ + (r0 + r) * L.ld_qkv, dQ + (r0 + r) * L.ld_qkv + Dh, 0.0f);
          }
          for (int64_t c0 = first_tile(opt, r0); c0 < kend; c0 += kCols) {
            const int64_t cols = std::min(kCols, kend - c0);
            gemm(false, true, rows, cols, Dh, opt.scale, Q + r0 * L.ld_qkv, L.ld_qkv,
                 K + c0 * L.ld_qkv, L.ld_qkv, 0.0f, P.data(), kCols);
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = r0 + r;
              float* prow = P.data() + r * kCols;
              float* pvrow = pv.data() + r * kCols;
              const float li = lse_row[i];
              const int64_t lim = li == kNegInf ? 0 : visible(i, c0, cols, opt.causal);
              const int32_t own = seg ? seg[i] : 0;
              const int64_t first = first_key(opt, i) - c0;
#pragma omp simd
              for (int64_t j = 0; j < lim; ++j)
                prow[j] = j >= first && (km == nullptr || km[c0 + j]) &&
                                  (seg == nullptr || seg[c0 + j] == own)
                              ? math::exp_approx(prow[j] - li)
                              : 0.0f;
              std::fill(prow + lim, prow + cols, 0.0f);
              if (dropout) {
                detail::fill_uniform(opt.seed, opt.stream, base + uint64_t(i * S + c0), lim,
                                     uniforms.data());
#pragma omp simd
                for (int64_t j = 0; j < lim; ++j)
                  pvrow[j] = uniforms[j] >= p ? prow[j] * keep_scale : 0.0f;
                std::fill(pvrow + lim, pvrow + cols, 0.0f);
              }
            }
            const float* pvd = dropout ? pv.data() : P.data();
            // dV[c] += pv^T dO
            gemm(true, false, cols, Dh, rows, 1.0f, pvd, kCols, dO + r0 * L.ld_out, L.ld_out, 1.0f,
                 dV + c0 * L.ld_qkv, L.ld_qkv);
            // dPv = dO V^T
            gemm(false, true, rows, cols, Dh, 1.0f, dO + r0 * L.ld_out, L.ld_out, V + c0 * L.ld_qkv,
                 L.ld_qkv, 0.0f, ds.data(), kCols);
            // dS = pv * dPv - P * D (see attention.cpp for why only pv is needed)
            for (int64_t r = 0; r < rows; ++r) {
              const float* prow = P.data() + r * kCols;
              const float* pvrow = pvd + r * kCols;
              float* drow = ds.data() + r * kCols;
              const float Dr = D[r];
#pragma omp simd
              for (int64_t j = 0; j < cols; ++j) drow[j] = pvrow[j] * drow[j] - prow[j] * Dr;
            }
            gemm(false, false, rows, Dh, cols, opt.scale, ds.data(), kCols, K + c0 * L.ld_qkv,
                 L.ld_qkv, 1.0f, dQ + r0 * L.ld_qkv, L.ld_qkv);
            gemm(true, false, cols, Dh, rows, opt.scale, ds.data(), kCols, Q + r0 * L.ld_qkv,
                 L.ld_qkv, 1.0f, dK + c0 * L.ld_qkv, L.ld_qkv);
          }
        }
      }
    }
  }
}

}  // namespace megatron::kernels::cpu
