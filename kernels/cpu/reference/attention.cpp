#include "kernels/cpu/reference/attention.h"

#include <cmath>
#include <vector>

#include "kernels/common/philox.h"

namespace megatron::kernels::ref {
namespace {

// Element offsets of the layouts documented in attention.h.
struct Index {
  const AttentionShape& sh;
  int64_t per_group() const { return sh.H / sh.G + 2; }
  int64_t head(int64_t s, int64_t b, int64_t g, int64_t slot, int64_t d) const {
    return (((s * sh.B + b) * sh.G + g) * per_group() + slot) * sh.Dh + d;
  }
  int64_t q(int64_t s, int64_t b, int64_t h, int64_t d) const {
    return head(s, b, h / (sh.H / sh.G), h % (sh.H / sh.G), d);
  }
  int64_t k(int64_t s, int64_t b, int64_t h, int64_t d) const {
    return head(s, b, h / (sh.H / sh.G), sh.H / sh.G, d);
  }
  int64_t v(int64_t s, int64_t b, int64_t h, int64_t d) const {
    return head(s, b, h / (sh.H / sh.G), sh.H / sh.G + 1, d);
  }
  int64_t out(int64_t s, int64_t b, int64_t h, int64_t d) const {
    return ((s * sh.B + b) * sh.H + h) * sh.Dh + d;
  }
  int64_t prob(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return ((b * sh.H + h) * sh.S + i) * sh.S + j;
  }
};

bool visible(const AttentionShape& sh, const AttentionOptions& opt, int64_t b, int64_t i,
             int64_t j) {
  if (opt.causal && j > i) return false;
  if (opt.window > 0 && i - j >= opt.window) return false;
  if (opt.segment_ids && opt.segment_ids[b * sh.S + j] != opt.segment_ids[b * sh.S + i])
    return false;
  return !opt.key_mask || opt.key_mask[b * sh.S + j] != 0;
}

// Dropout factor of probability (b, h, i, j): 0 or 1 / (1 - p).
double keep_factor(const AttentionShape& sh, const AttentionOptions& opt, int64_t b, int64_t h,
                   int64_t i, int64_t j) {
  if (opt.dropout_p <= 0.0f) return 1.0;
  const int64_t total_heads = sh.total_heads > 0 ? sh.total_heads : sh.H;
  const int64_t index =
      (((sh.batch_offset + b) * total_heads + sh.head_offset + h) * sh.S + i) * sh.S + j;
  const bool keep = philox::uniform(opt.seed, opt.stream, uint64_t(index)) >= opt.dropout_p;
  return keep ? 1.0 / (1.0 - double(opt.dropout_p)) : 0.0;
}

}  // namespace

void attention_forward_with_sinks(const AttentionShape& sh, const AttentionOptions& opt,
                                  const float* qkv, const float* sinks, float* out, float* probs) {
  const Index ix{sh};
  std::vector<double> p(sh.S);
  for (int64_t b = 0; b < sh.B; ++b) {
    for (int64_t h = 0; h < sh.H; ++h) {
      for (int64_t i = 0; i < sh.S; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < sh.S; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < sh.Dh; ++d)
            dot += double(qkv[ix.q(i, b, h, d)]) * qkv[ix.k(j, b, h, d)];
          p[j] = opt.scale * dot;
          if (opt.softcap > 0.0f) p[j] = opt.softcap * std::tanh(p[j] / opt.softcap);
          if (visible(sh, opt, b, i, j)) mx = std::fmax(mx, p[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < sh.S; ++j) {
          p[j] = visible(sh, opt, b, i, j) ? std::exp(p[j] - mx) : 0.0;
          sum += p[j];
        }
        if (sinks != nullptr && sum > 0.0) sum += std::exp(double(sinks[h]) - mx);
        for (int64_t j = 0; j < sh.S; ++j) {
          if (sum > 0.0) p[j] /= sum;  // sum == 0: fully masked row, all zeros
          probs[ix.prob(b, h, i, j)] = float(p[j]);
        }
        for (int64_t d = 0; d < sh.Dh; ++d) {
          double o = 0.0;
          for (int64_t j = 0; j < sh.S; ++j)
            o += p[j] * keep_factor(sh, opt, b, h, i, j) * qkv[ix.v(j, b, h, d)];
          out[ix.out(i, b, h, d)] = float(o);
        }
      }
    }
  }
}

// out = (P * keep) @ V with P = softmax(scale * Q K^T):
//   dV += (P * keep)^T dO;  dP = keep * (dO V^T);  dS = P * (dP - rowsum(P * dP));
//   dQ = scale * dS K;  dK += scale * dS^T Q   (K and V shared by the heads of a group)
// With sinks the rows of P sum to 1 - p_sink: d sink = -sum_i p_sink(i) rowsum(P * dP)(i).
void attention_backward_with_sinks(const AttentionShape& sh, const AttentionOptions& opt,
                                   const float* qkv, const float* probs, const float* dout,
                                   float* dqkv, float* dsinks) {
  const Index ix{sh};
  const int64_t total = sh.S * sh.B * (sh.H + 2 * sh.G) * sh.Dh;
  std::vector<double> acc(total, 0.0), dp(sh.S), keep(sh.S), dsink(sh.H, 0.0);
  for (int64_t b = 0; b < sh.B; ++b) {
    for (int64_t h = 0; h < sh.H; ++h) {
      for (int64_t i = 0; i < sh.S; ++i) {
        double dot = 0.0;
        for (int64_t j = 0; j < sh.S; ++j) {
          keep[j] = keep_factor(sh, opt, b, h, i, j);
          double dpv = 0.0;
          for (int64_t d = 0; d < sh.Dh; ++d)
            dpv += double(dout[ix.out(i, b, h, d)]) * qkv[ix.v(j, b, h, d)];
          dp[j] = keep[j] * dpv;
          dot += double(probs[ix.prob(b, h, i, j)]) * dp[j];
        }
        double row = 0.0;
        for (int64_t j = 0; j < sh.S; ++j) row += probs[ix.prob(b, h, i, j)];
        if (row > 0.0) dsink[h] -= (1.0 - row) * dot;
        for (int64_t j = 0; j < sh.S; ++j) {
          const double P = probs[ix.prob(b, h, i, j)];
          double ds = P * (dp[j] - dot);
          if (opt.softcap > 0.0f) {  // through cap tanh(s / cap): times 1 - tanh^2
            double s = 0.0;
            for (int64_t d = 0; d < sh.Dh; ++d)
              s += double(qkv[ix.q(i, b, h, d)]) * qkv[ix.k(j, b, h, d)];
            const double t = std::tanh(opt.scale * s / opt.softcap);
            ds *= 1.0 - t * t;
          }
          for (int64_t d = 0; d < sh.Dh; ++d) {
            acc[ix.q(i, b, h, d)] += opt.scale * ds * qkv[ix.k(j, b, h, d)];
            acc[ix.k(j, b, h, d)] += opt.scale * ds * qkv[ix.q(i, b, h, d)];
            acc[ix.v(j, b, h, d)] += P * keep[j] * dout[ix.out(i, b, h, d)];
          }
        }
      }
    }
  }
  for (int64_t e = 0; e < total; ++e) dqkv[e] = float(acc[e]);
  if (dsinks != nullptr)
    for (int64_t h = 0; h < sh.H; ++h) dsinks[h] = float(dsink[h]);
}

void attention_forward(const AttentionShape& sh, const AttentionOptions& opt, const float* qkv,
                       float* out, float* probs) {
  attention_forward_with_sinks(sh, opt, qkv, nullptr, out, probs);
}

void attention_backward(const AttentionShape& sh, const AttentionOptions& opt, const float* qkv,
                        const float* probs, const float* dout, float* dqkv) {
  attention_backward_with_sinks(sh, opt, qkv, probs, dout, dqkv, nullptr);
}

}  // namespace megatron::kernels::ref
