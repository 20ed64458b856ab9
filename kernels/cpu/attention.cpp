#include "kernels/cpu/attention.h"

#include <algorithm>
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

// Query rows are processed in blocks, bounding the per-thread scratch to block x S floats.
// Under a causal mask, block [r0, r1) only needs keys [0, r1): small blocks skip most of the
// masked upper triangle in every GEMM; without it, larger blocks make more efficient GEMMs.
constexpr int64_t kCausalRowBlock = 64;
constexpr int64_t kRowBlock = 256;
int64_t row_block(const AttentionOptions& opt) { return opt.causal ? kCausalRowBlock : kRowBlock; }

// Turns scaled scores row[0, S) of query i into masked probabilities in place: row[j] for
// j >= lim (causal), j < first (outside a sliding window), padded keys or keys of another
// segment is exactly 0; a row with no visible key is all zeros.
void masked_softmax_row(float* row, int64_t S, int64_t first, int64_t lim, const uint8_t* key_mask,
                        const int32_t* segments, int32_t segment) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < std::min(first, lim); ++j) row[j] = kNegInf;
  if (key_mask) {
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) row[j] = key_mask[j] ? row[j] : kNegInf;
  }
  if (segments) {
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) row[j] = segments[j] == segment ? row[j] : kNegInf;
  }
  const float mx = detail::max_of(row, lim);
  if (mx == kNegInf) lim = 0;  // fully masked row
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < lim; ++j) {
    row[j] = math::exp_approx(row[j] - mx);  // exp(-inf) = 0 for padded keys
    sum += row[j];
  }
  const float inv = lim > 0 ? 1.0f / sum : 0.0f;
#pragma omp simd
  for (int64_t j = 0; j < lim; ++j) row[j] *= inv;
  std::fill(row + lim, row + S, 0.0f);
}

// Dropout of probability rows [r0, r1) of head (b, h) into pd (row stride S), columns
// [0, kend). Element (i, j) uses Philox index base + i * S + j as documented in attention.h.
void dropout_rows(const float* P, float* pd, int64_t r0, int64_t r1, int64_t kend, int64_t S,
                  bool causal, const AttentionOptions& opt, uint64_t base, float* uniforms) {
  const float p = opt.dropout_p, keep_scale = 1.0f / (1.0f - p);
  for (int64_t i = r0; i < r1; ++i) {
    const float* prow = P + i * S;
    float* drow = pd + (i - r0) * S;
    const int64_t lim = causal ? i + 1 : kend;  // the rest is masked: 0 either way
    detail::fill_uniform(opt.seed, opt.stream, base + uint64_t(i * S), lim, uniforms);
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) drow[j] = uniforms[j] >= p ? prow[j] * keep_scale : 0.0f;
    std::fill(drow + lim, drow + kend, 0.0f);
  }
}

}  // namespace

void attention_forward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs) {
  check_shape("attention", shape, opt);
  MT_CHECK(opt.softcap == 0.0f, "unfused attention has no soft-capping (the flash kernels do)");
  const Layout L(shape);
  const int64_t S = L.S, Dh = L.Dh;
  if (S == 0 || L.B == 0 || L.H == 0) return;
  const bool dropout = opt.dropout_p > 0.0f;
  const int64_t block = std::min(row_block(opt), S);
  const int64_t pairs = L.B * L.H;
  // One (b, h) per iteration; BLAS runs single-threaded inside the region. A single pair stays
  // serial and lets BLAS use the threads instead.
#pragma omp parallel if (pairs > 1)
  {
    std::vector<float> pd(dropout ? block * S : 0), uniforms(dropout ? S : 0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / L.H, h = bh % L.H, g = h / L.heads_per_group;
      const float* Q = qkv + L.q(b, h);
      const float* K = qkv + L.k(b, g);
      const float* V = qkv + L.v(b, g);
      float* O = out + L.out(b, h);
      float* P = probs + bh * S * S;
      const uint8_t* km = opt.key_mask ? opt.key_mask + b * S : nullptr;
      const int32_t* seg = opt.segment_ids ? opt.segment_ids + b * S : nullptr;
      for (int64_t r0 = 0; r0 < S; r0 += block) {
        const int64_t r1 = std::min(r0 + block, S), rows = r1 - r0;
        const int64_t kend = L.key_end(r1, opt.causal);
        gemm(false, true, rows, kend, Dh, opt.scale, Q + r0 * L.ld_qkv, L.ld_qkv, K, L.ld_qkv, 0.0f,
             P + r0 * S, S);
        for (int64_t i = r0; i < r1; ++i)
          masked_softmax_row(P + i * S, S, first_key(opt, i), opt.causal ? i + 1 : S, km, seg,
                             seg ? seg[i] : 0);
        const float* pv = P + r0 * S;
        if (dropout) {
          dropout_rows(P, pd.data(), r0, r1, kend, S, opt.causal, opt, dropout_base(shape, b, h),
                       uniforms.data());
          pv = pd.data();
        }
        gemm(false, false, rows, Dh, kend, 1.0f, pv, S, V, L.ld_qkv, 0.0f, O + r0 * L.ld_out,
             L.ld_out);
      }
    }
  }
}

void attention_backward(const AttentionShape& shape, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv) {
  check_shape("attention", shape, opt);
  MT_CHECK(opt.softcap == 0.0f, "unfused attention has no soft-capping (the flash kernels do)");
  const Layout L(shape);
  const int64_t S = L.S, Dh = L.Dh;
  if (S == 0 || L.B == 0 || L.H == 0) return;
  const bool dropout = opt.dropout_p > 0.0f;
  const int64_t block = std::min(row_block(opt), S);
  const int64_t groups = L.B * L.G;
  // One (b, g) per iteration: the group's heads add into its dK and dV in head order, so the
  // sums need no atomics and do not depend on the thread count.
#pragma omp parallel if (groups > 1)
  {
    std::vector<float> pd(dropout ? block * S : 0), uniforms(dropout ? S : 0);
    std::vector<float> ds(block * S);
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < groups; ++bg) {
      const int64_t b = bg / L.G, g = bg % L.G;
      const float* K = qkv + L.k(b, g);
      const float* V = qkv + L.v(b, g);
      float* dK = dqkv + L.k(b, g);
      float* dV = dqkv + L.v(b, g);
      for (int64_t s = 0; s < S; ++s) {
        std::fill(dK + s * L.ld_qkv, dK + s * L.ld_qkv + Dh, 0.0f);
        std::fill(dV + s * L.ld_qkv, dV + s * L.ld_qkv + Dh, 0.0f);
      }
      for (int64_t h = g * L.heads_per_group; h < (g + 1) * L.heads_per_group; ++h) {
        const float* Q = qkv + L.q(b, h);
        float* dQ = dqkv + L.q(b, h);
        const float* dO = dout + L.out(b, h);
        const float* P = probs + (b * L.H + h) * S * S;
        for (int64_t r0 = 0; r0 < S; r0 += block) {
          const int64_t r1 = std::min(r0 + block, S), rows = r1 - r0;
          const int64_t kend = L.key_end(r1, opt.causal);
          // pv: the probabilities after dropout, as forward multiplied them into V.
          const float* pv = P + r0 * S;
          if (dropout) {
            dropout_rows(P, pd.data(), r0, r1, kend, S, opt.causal, opt, dropout_base(shape, b, h),
                         uniforms.data());
            pv = pd.data();
          }
          gemm(true, false, kend, Dh, rows, 1.0f, pv, S, dO + r0 * L.ld_out, L.ld_out, 1.0f, dV,
               L.ld_qkv);
          gemm(false, true, rows, kend, Dh, 1.0f, dO + r0 * L.ld_out, L.ld_out, V, L.ld_qkv, 0.0f,
               ds.data(), S);
          // With m the keep mask and c = 1/(1-p): dP = c m dPv and P * dP = pv * dPv, so the
          // softmax backward dS = P (dP - sum(P dP)) needs only pv, never the mask itself.
          for (int64_t i = 0; i < rows; ++i) {
            const float* prow = P + (r0 + i) * S;
            const float* pvrow = pv + i * S;
            float* drow = ds.data() + i * S;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = 0; j < kend; ++j) dot += pvrow[j] * drow[j];
#pragma omp simd
            for (int64_t j = 0; j < kend; ++j) drow[j] = pvrow[j] * drow[j] - prow[j] * dot;
          }
          gemm(false, false, rows, Dh, kend, opt.scale, ds.data(), S, K, L.ld_qkv, 0.0f,
               dQ + r0 * L.ld_qkv, L.ld_qkv);
          gemm(true, false, kend, Dh, rows, opt.scale, ds.data(), S, Q + r0 * L.ld_qkv, L.ld_qkv,
               1.0f, dK, L.ld_qkv);
        }
      }
    }
  }
}

}  // namespace megatron::kernels::cpu
