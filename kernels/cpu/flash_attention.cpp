#include "kernels/cpu/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
constexpr int64_t kRows = 256;
constexpr int64_t kCols = 256;

// Where a call's query and key rows come from and sit in the global sequence. A whole-sequence
// call is the block with both starts 0 and both row counts S, reading keys from the fused qkv.
struct Rows {
  Layout q, kv;    // q: fused qkv rows; kv: fused rows or packed [rows, B, G, 2, Dh]
  int64_t q0, k0;  // global positions of query row 0 and key row 0
  int64_t Sq, Sk;  // rows of each
  int64_t S;       // the global sequence (masks and dropout indices)

  Rows(const AttentionShape& s, const AttentionBlock& b)
      : q(s),
        kv(b.kv_packed ? packed_layout(s) : Layout(s)),
        q0(b.q_start),
        k0(b.k_start),
        Sq(b.q_rows),
        Sk(b.k_rows),
        S(s.S) {}
  static Layout packed_layout(AttentionShape s) {
    s.H = 0;  // no query heads: each group is just its key and value head
    return Layout(s);
  }
  // Keys (local index) the query rows [r0, r1) can see at most (causal clips at the last row).
  int64_t key_end(int64_t r1, bool causal) const {
    return causal ? std::clamp<int64_t>(q0 + r1 - k0, 0, Sk) : Sk;
  }
  // The first key tile rows starting at r0 need: tiles wholly before every row's sliding
  // window hold only masked keys.
  int64_t first_tile(const AttentionOptions& opt, int64_t r0) const {
    return std::max<int64_t>(0, first_key(opt, q0 + r0) - k0) / kCols * kCols;
  }
  // Number of visible columns [c0, c0 + lim) of row i in the tile of cols keys at local key c0
  // (causal clips at i); key_mask holes and the sliding window's start are applied separately.
  int64_t visible(int64_t i, int64_t c0, int64_t cols, bool causal) const {
    if (!causal) return cols;
    return std::clamp<int64_t>(q0 + i + 1 - (k0 + c0), 0, cols);
  }
};

void check_block(const char* op, const AttentionShape& s, const AttentionBlock& b) {
  MT_CHECK(b.q_start >= 0 && b.q_rows >= 0 && b.q_start + b.q_rows <= s.S && b.k_start >= 0 &&
               b.k_rows >= 0 && b.k_start + b.k_rows <= s.S,
           op, ": block rows q [", b.q_start, ", ", b.q_start + b.q_rows, ") k [", b.k_start, ", ",
           b.k_start + b.k_rows, ") outside a sequence of ", s.S);
}

// Scores row (cols of them, tile at local key c0) of query row i masked in place.
void mask_row(const Rows& R, const AttentionOptions& opt, const uint8_t* km, const int32_t* seg,
              int64_t i, int64_t c0, int64_t lim, float* row) {
  const int64_t kg = R.k0 + c0;  // global position of the tile's first key
  for (int64_t j = 0; j < std::min(first_key(opt, R.q0 + i) - kg, lim); ++j) row[j] = kNegInf;
  if (km) {
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) row[j] = km[kg + j] ? row[j] : kNegInf;
  }
  if (seg) {
    const int32_t own = seg[R.q0 + i];
#pragma omp simd
    for (int64_t j = 0; j < lim; ++j) row[j] = seg[kg + j] == own ? row[j] : kNegInf;
  }
}

// Soft-caps a tile of scores in place (opt.softcap > 0); with `grad`, also stores each score's
// derivative 1 - tanh^2 there (same layout).
void softcap_tile(const AttentionOptions& opt, float* sc, int64_t rows, int64_t cols, float* grad) {
  if (opt.softcap <= 0.0f) return;
  const float cap = opt.softcap;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = sc + r * kCols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) row[j] = math::softcap(row[j], cap);
    if (grad == nullptr) continue;
    float* g = grad + r * kCols;
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) g[j] = math::softcap_grad_from_output(row[j], cap);
  }
}

// Forward of one (b, h) over query rows [r0, r1): the online softmax over key tiles into O
// (normalised at the end) and lse_row.
struct ForwardScratch {
  std::vector<float> sc = std::vector<float>(kRows * kCols), m = std::vector<float>(kRows),
                     l = std::vector<float>(kRows), uniforms = std::vector<float>(kCols);
};

void forward_rows(const Rows& R, const AttentionOptions& opt, const float* Q, const float* K,
                  const float* V, float* O, float* lse_row, const uint8_t* km, const int32_t* seg,
                  uint64_t base, int64_t r0, int64_t r1, ForwardScratch& w) {
  const int64_t Dh = R.q.Dh, rows = r1 - r0, kend = R.key_end(r1, opt.causal);
  const bool dropout = opt.dropout_p > 0.0f;
  const float p = opt.dropout_p, keep_scale = 1.0f / (1.0f - p);
  std::fill(w.m.begin(), w.m.end(), kNegInf);
  std::fill(w.l.begin(), w.l.end(), 0.0f);
  for (int64_t i = r0; i < r1; ++i) std::fill(O + i * R.q.ld_out, O + i * R.q.ld_out + Dh, 0.0f);
  for (int64_t c0 = R.first_tile(opt, r0); c0 < kend; c0 += kCols) {
    const int64_t cols = std::min(kCols, kend - c0);
    gemm(false, true, rows, cols, Dh, opt.scale, Q + r0 * R.q.ld_qkv, R.q.ld_qkv,
         K + c0 * R.kv.ld_qkv, R.kv.ld_qkv, 0.0f, w.sc.data(), kCols);
    softcap_tile(opt, w.sc.data(), rows, cols, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r0 + r;
      float* row = w.sc.data() + r * kCols;
      const int64_t lim = R.visible(i, c0, cols, opt.causal);
      mask_row(R, opt, km, seg, i, c0, lim, row);
      const float mx = std::max(w.m[r], detail::max_of(row, lim));
      float* o = O + i * R.q.ld_out;
      if (mx == kNegInf) {  // nothing visible yet: the row stays empty
        std::fill(row, row + cols, 0.0f);
        continue;
      }
      const float alpha = w.m[r] == kNegInf ? 0.0f : math::exp_approx(w.m[r] - mx);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < lim; ++j) {
        row[j] = math::exp_approx(row[j] - mx);
        sum += row[j];
      }
      std::fill(row + lim, row + cols, 0.0f);
      w.l[r] = w.l[r] * alpha + sum;
      w.m[r] = mx;
      if (alpha != 1.0f) {
#pragma omp simd
        for (int64_t d = 0; d < Dh; ++d) o[d] *= alpha;
      }
      if (dropout) {
        detail::fill_uniform(opt.seed, opt.stream, base + uint64_t((R.q0 + i) * R.S + R.k0 + c0),
                             lim, w.uniforms.data());
#pragma omp simd
        for (int64_t j = 0; j < lim; ++j) row[j] = w.uniforms[j] >= p ? row[j] * keep_scale : 0.0f;
      }
    }
    gemm(false, false, rows, Dh, cols, 1.0f, w.sc.data(), kCols, V + c0 * R.kv.ld_qkv, R.kv.ld_qkv,
         1.0f, O + r0 * R.q.ld_out, R.q.ld_out);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r0 + r;
    float* o = O + i * R.q.ld_out;
    if (w.l[r] > 0.0f) {
      const float inv = 1.0f / w.l[r];
#pragma omp simd
      for (int64_t d = 0; d < Dh; ++d) o[d] *= inv;
      lse_row[i] = w.m[r] + std::log(w.l[r]);
    } else {
      std::fill(o, o + Dh, 0.0f);
      lse_row[i] = kNegInf;
    }
  }
}

void forward(const AttentionShape& shape, const AttentionOptions& opt, const Rows& R,
             const float* q, const float* kv, float* out, float* lse) {
  const Layout& L = R.q;
  if (R.Sq == 0 || L.B == 0 || L.H == 0) return;
  const int64_t pairs = L.B * L.H;
#pragma omp parallel if (pairs > 1)
  {
    ForwardScratch w;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / L.H, h = bh % L.H, g = h / L.heads_per_group;
      const uint8_t* km = opt.key_mask ? opt.key_mask + b * R.S : nullptr;
      const int32_t* seg = opt.segment_ids ? opt.segment_ids + b * R.S : nullptr;
      for (int64_t r0 = 0; r0 < R.Sq; r0 += kRows)
        forward_rows(R, opt, q + L.q(b, h), kv + R.kv.k(b, g), kv + R.kv.v(b, g), out + L.out(b, h),
                     lse + bh * R.Sq, km, seg, dropout_base(shape, b, h), r0,
                     std::min(r0 + kRows, R.Sq), w);
    }
  }
}

struct BackwardScratch {
  std::vector<float> P = std::vector<float>(kRows * kCols), pv = std::vector<float>(kRows * kCols),
                     ds = std::vector<float>(kRows * kCols), D = std::vector<float>(kRows),
                     uniforms = std::vector<float>(kCols);
  std::vector<float> cap_grad;  // soft-capping: d(capped score) / d(score) per tile element
};

// The recomputed probabilities P (and with dropout the kept ones pv) of one tile.
void tile_probs(const Rows& R, const AttentionOptions& opt, const float* lse_row, const uint8_t* km,
                const int32_t* seg, uint64_t base, int64_t r0, int64_t rows, int64_t c0,
                int64_t cols, BackwardScratch& w) {
  const float p = opt.dropout_p, keep_scale = 1.0f / (1.0f - p);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r0 + r;
    float* prow = w.P.data() + r * kCols;
    float* pvrow = w.pv.data() + r * kCols;
    const float li = lse_row[i];
    const int64_t lim = li == kNegInf ? 0 : R.visible(i, c0, cols, opt.causal);
    const int64_t kg = R.k0 + c0;
    const int32_t own = seg ? seg[R.q0 + i] : 0;
    const int64_t first = first_key(opt, R.q0 + i) - kg;
    if (km == nullptr && seg == nullptr && first <= 0) {  // every key up to lim is visible
#pragma omp simd
      for (int64_t j = 0; j < lim; ++j) prow[j] = math::exp_approx(prow[j] - li);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < lim; ++j)
        prow[j] =
            j >= first && (km == nullptr || km[kg + j]) && (seg == nullptr || seg[kg + j] == own)
                ? math::exp_approx(prow[j] - li)
                : 0.0f;
    }
    std::fill(prow + lim, prow + cols, 0.0f);
    if (p > 0.0f) {
      detail::fill_uniform(opt.seed, opt.stream, base + uint64_t((R.q0 + i) * R.S + kg), lim,
                           w.uniforms.data());
#pragma omp simd
      for (int64_t j = 0; j < lim; ++j) pvrow[j] = w.uniforms[j] >= p ? prow[j] * keep_scale : 0.0f;
      std::fill(pvrow + lim, pvrow + cols, 0.0f);
    }
  }
}

struct HeadPtrs {
  const float *Q, *K, *V, *O, *dO, *lse_row;
  float *dQ, *dK, *dV;
};

// Backward of one (b, h) over query rows [r0, r1), adding into dQ, dK and dV.
void backward_rows(const Rows& R, const AttentionOptions& opt, const HeadPtrs& t, const uint8_t* km,
                   const int32_t* seg, uint64_t base, int64_t r0, int64_t r1, BackwardScratch& w) {
  const Layout &L = R.q, &KV = R.kv;
  const int64_t Dh = L.Dh, rows = r1 - r0, kend = R.key_end(r1, opt.causal);
  const bool capped = opt.softcap > 0.0f;
  if (capped) w.cap_grad.resize(kRows * kCols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* o = t.O + (r0 + r) * L.ld_out;
    const float* d_o = t.dO + (r0 + r) * L.ld_out;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < Dh; ++d) dot += o[d] * d_o[d];
    w.D[r] = dot;
  }
  for (int64_t c0 = R.first_tile(opt, r0); c0 < kend; c0 += kCols) {
    const int64_t cols = std::min(kCols, kend - c0);
    gemm(false, true, rows, cols, Dh, opt.scale, t.Q + r0 * L.ld_qkv, L.ld_qkv,
         t.K + c0 * KV.ld_qkv, KV.ld_qkv, 0.0f, w.P.data(), kCols);
    softcap_tile(opt, w.P.data(), rows, cols, capped ? w.cap_grad.data() : nullptr);
    tile_probs(R, opt, t.lse_row, km, seg, base, r0, rows, c0, cols, w);
    const float* pvd = opt.dropout_p > 0.0f ? w.pv.data() : w.P.data();
    // dV[c] += pv^T dO
    gemm(true, false, cols, Dh, rows, 1.0f, pvd, kCols, t.dO + r0 * L.ld_out, L.ld_out, 1.0f,
         t.dV + c0 * KV.ld_qkv, KV.ld_qkv);
    // dPv = dO V^T
    gemm(false, true, rows, cols, Dh, 1.0f, t.dO + r0 * L.ld_out, L.ld_out, t.V + c0 * KV.ld_qkv,
         KV.ld_qkv, 0.0f, w.ds.data(), kCols);
    // dS = pv * dPv - P * D (see attention.cpp for why only pv is needed)
    for (int64_t r = 0; r < rows; ++r) {
      const float* prow = w.P.data() + r * kCols;
      const float* pvrow = pvd + r * kCols;
      float* drow = w.ds.data() + r * kCols;
      const float Dr = w.D[r];
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) drow[j] = pvrow[j] * drow[j] - prow[j] * Dr;
      if (capped) {  // through the cap: d(score) = d(capped) (1 - tanh^2)
        const float* g = w.cap_grad.data() + r * kCols;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) drow[j] *= g[j];
      }
    }
    gemm(false, false, rows, Dh, cols, opt.scale, w.ds.data(), kCols, t.K + c0 * KV.ld_qkv,
         KV.ld_qkv, 1.0f, t.dQ + r0 * L.ld_qkv, L.ld_qkv);
    gemm(true, false, cols, Dh, rows, opt.scale, w.ds.data(), kCols, t.Q + r0 * L.ld_qkv, L.ld_qkv,
         1.0f, t.dK + c0 * KV.ld_qkv, KV.ld_qkv);
  }
}

// Adds every head's gradients into dq (query rows, fused layout) and dkv (key rows, kv layout).
void backward(const AttentionShape& shape, const AttentionOptions& opt, const Rows& R,
              const float* q, const float* kv, const float* out, const float* lse,
              const float* dout, float* dq, float* dkv) {
  const Layout& L = R.q;
  if (R.Sq == 0 || L.B == 0 || L.H == 0) return;
  const int64_t groups = L.B * L.G;
  // One (b, g) per iteration: the group's heads add into its dK and dV in head order (no
  // atomics, independent of the thread count), as the unfused backward.
#pragma omp parallel if (groups > 1)
  {
    BackwardScratch w;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bg = 0; bg < groups; ++bg) {
      const int64_t b = bg / L.G, g = bg % L.G;
      const uint8_t* km = opt.key_mask ? opt.key_mask + b * R.S : nullptr;
      const int32_t* seg = opt.segment_ids ? opt.segment_ids + b * R.S : nullptr;
      for (int64_t h = g * L.heads_per_group; h < (g + 1) * L.heads_per_group; ++h) {
        const HeadPtrs t{q + L.q(b, h),     kv + R.kv.k(b, g),  kv + R.kv.v(b, g),
                         out + L.out(b, h), dout + L.out(b, h), lse + (b * L.H + h) * R.Sq,
                         dq + L.q(b, h),    dkv + R.kv.k(b, g), dkv + R.kv.v(b, g)};
        for (int64_t r0 = 0; r0 < R.Sq; r0 += kRows)
          backward_rows(R, opt, t, km, seg, dropout_base(shape, b, h), r0,
                        std::min(r0 + kRows, R.Sq), w);
      }
    }
  }
}

AttentionBlock whole(const AttentionShape& s) { return AttentionBlock{0, s.S, 0, s.S, false}; }

}  // namespace

void flash_attention_merge(int64_t rows, int64_t B, int64_t H, int64_t Dh, const float* out,
                           const float* lse, float* acc_out, float* acc_lse,
                           int64_t acc_lse_stride) {
  const int64_t pairs = B * H;
#pragma omp parallel for if (pairs * rows * Dh > (1 << 16))
  for (int64_t bh = 0; bh < pairs; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    for (int64_t i = 0; i < rows; ++i) {
      const float l = lse[bh * rows + i];
      float& acc_l = acc_lse[bh * acc_lse_stride + i];
      if (l == kNegInf) continue;
      const float* o = out + ((i * B + b) * H + h) * Dh;
      float* a = acc_out + ((i * B + b) * H + h) * Dh;
      if (acc_l == kNegInf) {
        std::copy(o, o + Dh, a);
        acc_l = l;
        continue;
      }
      const float mx = std::max(acc_l, l);
      const float wa = std::exp(acc_l - mx), wb = std::exp(l - mx), sum = wa + wb;
      const float ca = wa / sum, cb = wb / sum;
#pragma omp simd
      for (int64_t d = 0; d < Dh; ++d) a[d] = a[d] * ca + o[d] * cb;
      acc_l = mx + std::log(sum);
    }
  }
}

void flash_attention_forward(const AttentionShape& shape, const AttentionOptions& opt,
                             const float* qkv, float* out, float* lse) {
  check_shape("flash_attention", shape, opt);
  forward(shape, opt, Rows(shape, whole(shape)), qkv, qkv, out, lse);
}

void flash_attention_backward(const AttentionShape& shape, const AttentionOptions& opt,
                              const float* qkv, const float* out, const float* lse,
                              const float* dout, float* dqkv) {
  check_shape("flash_attention", shape, opt);
  std::memset(
      dqkv, 0,
      sizeof(float) * static_cast<size_t>(shape.S * shape.B * (shape.H + 2 * shape.G) * shape.Dh));
  backward(shape, opt, Rows(shape, whole(shape)), qkv, qkv, out, lse, dout, dqkv, dqkv);
}

void flash_attention_block_forward(const AttentionShape& shape, const AttentionOptions& opt,
                                   const AttentionBlock& block, const float* q, const float* kv,
                                   float* out, float* lse) {
  check_shape("flash_attention_block", shape, opt);
  check_block("flash_attention_block", shape, block);
  forward(shape, opt, Rows(shape, block), q, kv, out, lse);
}

void flash_attention_block_backward(const AttentionShape& shape, const AttentionOptions& opt,
                                    const AttentionBlock& block, const float* q, const float* kv,
                                    const float* out, const float* lse, const float* dout,
                                    float* dq, float* dkv) {
  check_shape("flash_attention_block", shape, opt);
  check_block("flash_attention_block", shape, block);
  backward(shape, opt, Rows(shape, block), q, kv, out, lse, dout, dq, dkv);
}

}  // namespace megatron::kernels::cpu
