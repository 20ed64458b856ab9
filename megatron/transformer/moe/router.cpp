#include "megatron/transformer/moe/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "megatron/core/error.h"

namespace megatron::moe {
namespace {

using config::MoeLoadBalancing;
using config::MoeScoreFunction;
using config::MoeTokenDropPolicy;

// Indices of the k largest of v[0..n) (descending; ties to the lower index), skipping masked.
void top_k(const float* v, int64_t n, int64_t k, const uint8_t* allowed, int32_t* out) {
  thread_local std::vector<int32_t> idx;
  idx.clear();
  for (int64_t i = 0; i < n; ++i)
    if (allowed == nullptr || allowed[i]) idx.push_back(static_cast<int32_t>(i));
  MT_CHECK(static_cast<int64_t>(idx.size()) >= k, "top_k: ", idx.size(), " candidates for k ", k);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}

void softmax_row(const float* x, int64_t n, float* y, float* lse_out) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - m));
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<float>(std::exp(static_cast<double>(x[i] - m)) / sum);
  if (lse_out) *lse_out = m + static_cast<float>(std::log(sum));
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

bool uses_scores(const RouterOptions& o) {
  return o.score == MoeScoreFunction::Sigmoid || o.pre_softmax;
}

// How near the split of v (sorted descending) into its first c values and the rest is to
// changing: the gap across the boundary. An exact tie at the boundary is broken by index, the
// same way in every run; the next distinct value on either side is what round-off could move
// across it. +inf when one side is empty or everything is equal.
float boundary_gap(const float* v, int64_t n, int64_t c) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (c <= 0 || c >= n) return kInf;
  const float hi = v[c - 1], lo = v[c];
  if (hi > lo) return hi - lo;
  float gap = kInf;
  for (int64_t i = c - 1; i >= 0; --i)
    if (v[i] > hi) {
      gap = v[i] - hi;
      break;
    }
  for (int64_t j = c; j < n; ++j)
    if (v[j] < lo) {
      gap = std::min(gap, lo - v[j]);
      break;
    }
  return gap;
}

// boundary_gap of a top-k over the allowed candidates of choice[0, n), from its k picks: the
// same value without sorting every token's choices (this runs for every routed token).
float choice_margin(const float* choice, int64_t n, const int32_t* picked, int64_t k,
                    const uint8_t* allowed) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  auto left_out = [&](int64_t e) {
    return (allowed == nullptr || allowed[e]) &&
           std::find(picked, picked + k, static_cast<int32_t>(e)) == picked + k;
  };
  float hi = kInf, lo = -kInf;  // the weakest pick, the best candidate left out
  bool any_left_out = false;
  for (int64_t j = 0; j < k; ++j) hi = std::min(hi, choice[picked[j]]);
  for (int64_t e = 0; e < n; ++e)
    if (left_out(e)) {
      any_left_out = true;
      lo = std::max(lo, choice[e]);
    }
  if (!any_left_out) return kInf;
  if (hi > lo) return hi - lo;
  // An exact tie at the boundary: the next distinct value on either side.
  float above = kInf, below = -kInf;
  for (int64_t j = 0; j < k; ++j)
    if (choice[picked[j]] > hi) above = std::min(above, choice[picked[j]]);
  for (int64_t e = 0; e < n; ++e)
    if (left_out(e) && choice[e] < lo) below = std::max(below, choice[e]);
  return std::min(above - hi, lo - below);
}

// The group-limit mask of one token: experts of its best group_topk groups. Returns the
// boundary gap of the groups' scores.
float group_mask(const float* choice, const RouterOptions& o, uint8_t* allowed) {
  const int64_t E = o.num_experts, G = o.num_groups, per = E / G;
  const int64_t best = o.topk / o.group_topk;
  std::vector<float> group_score(static_cast<size_t>(G));
  std::vector<int32_t> pick(static_cast<size_t>(std::max(best, o.group_topk)));
  for (int64_t g = 0; g < G; ++g) {
    top_k(choice + g * per, per, best, nullptr, pick.data());
    float s = 0;
    for (int64_t j = 0; j < best; ++j) s += choice[g * per + pick[static_cast<size_t>(j)]];
    group_score[static_cast<size_t>(g)] = s;
  }
  top_k(group_score.data(), G, o.group_topk, nullptr, pick.data());
  std::fill(allowed, allowed + E, uint8_t{0});
  for (int64_t j = 0; j < o.group_topk; ++j) {
    const int32_t g = pick[static_cast<size_t>(j)];
    std::fill(allowed + g * per, allowed + (g + 1) * per, uint8_t{1});
  }
  return choice_margin(group_score.data(), G, pick.data(), o.group_topk, nullptr);
}

bool balancing_on(const RouterOptions& o) { return o.balancing != MoeLoadBalancing::None; }

}  // namespace

Routing route(const float* logits, int64_t T, const RouterOptions& o, const float* bias) {
  const int64_t E = o.num_experts, k = o.topk;
  MT_CHECK(E > 0 && k >= 1 && k <= E, "route: topk ", k, " with ", E, " experts");
  Routing r;
  r.tokens = T;
  r.logits.assign(logits, logits + T * E);
  r.experts.resize(static_cast<size_t>(T * k));
  r.gates.resize(static_cast<size_t>(T * k));
  r.kept.assign(static_cast<size_t>(T * k), 1);
  if (uses_scores(o)) r.scores.resize(static_cast<size_t>(T * E));
  if (!uses_scores(o)) r.picked_probs.resize(static_cast<size_t>(T * k));
  if (balancing_on(o)) r.balance_probs.resize(static_cast<size_t>(T * E));
  if (o.z_loss_coeff > 0) r.lse.resize(static_cast<size_t>(T));
  std::vector<float> choice(static_cast<size_t>(E)), probs(static_cast<size_t>(E));
  std::vector<uint8_t> allowed(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    float lse = 0;
    softmax_row(l, E, probs.data(), &lse);
    if (!r.lse.empty()) r.lse[static_cast<size_t>(t)] = lse;
    float* score = uses_scores(o) ? r.scores.data() + t * E : nullptr;
    if (score) {
      for (int64_t e = 0; e < E; ++e)
        score[e] =
            o.score == MoeScoreFunction::Sigmoid ? sigmoid(l[e]) : probs[static_cast<size_t>(e)];
      for (int64_t e = 0; e < E; ++e)
        choice[static_cast<size_t>(e)] = score[e] + (bias ? bias[e] : 0.0f);
    } else {
      std::copy(l, l + E, choice.begin());
    }
    const uint8_t* mask = nullptr;
    if (o.num_groups > 0) {
      r.min_margin = std::min(r.min_margin, group_mask(choice.data(), o, allowed.data()));
      mask = allowed.data();
    }
    int32_t* picked = r.experts.data() + t * k;
    top_k(choice.data(), E, k, mask, picked);
    r.min_margin = std::min(r.min_margin, choice_margin(choice.data(), E, picked, k, mask));
    float* gate = r.gates.data() + t * k;
    if (o.score == MoeScoreFunction::Sigmoid) {
      double z = 0;
      for (int64_t j = 0; j < k; ++j) z += score[picked[j]];
      for (int64_t j = 0; j < k; ++j)
        gate[j] = k > 1 ? static_cast<float>(score[picked[j]] / (z + 1e-20)) : score[picked[j]];
    } else if (o.pre_softmax) {
      for (int64_t j = 0; j < k; ++j) gate[j] = score[picked[j]];
    } else {
      float sel[64];
      MT_CHECK(k <= 64, "route: topk ", k, " above 64");
      for (int64_t j = 0; j < k; ++j) sel[j] = l[picked[j]];
      softmax_row(sel, k, r.picked_probs.data() + t * k, nullptr);
      std::copy(r.picked_probs.data() + t * k, r.picked_probs.data() + (t + 1) * k, gate);
    }
    for (int64_t j = 0; j < k; ++j) gate[j] *= o.scaling_factor;
    if (balancing_on(o)) {
      float* p = r.balance_probs.data() + t * E;
      if (o.score == MoeScoreFunction::Sigmoid) {
        double z = 0;
        for (int64_t e = 0; e < E; ++e) z += score[e];
        for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(score[e] / (z + 1e-20));
      } else {
        std::copy(probs.begin(), probs.end(), p);
      }
    }
  }
  return r;
}

std::vector<double> balance_counts(const Routing& r, const RouterOptions& o, int64_t B) {
  const int64_t E = o.num_experts, k = o.topk, T = r.tokens;
  const bool seq = o.balancing == MoeLoadBalancing::SeqAuxLoss;
  std::vector<double> counts(static_cast<size_t>(seq ? B * E : E), 0.0);
  if (!balancing_on(o)) return counts;
  MT_CHECK(B > 0 && T % B == 0, "balance_counts: ", T, " tokens are not whole rows of batch ", B);
  std::vector<int32_t> picked(static_cast<size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    top_k(r.balance_probs.data() + t * E, E, k, nullptr, picked.data());
    const int64_t row = seq ? (t % B) * E : 0;
    for (int32_t e : picked) counts[static_cast<size_t>(row + e)] += 1.0;
  }
  return counts;
}

BalanceLoss balance_loss(const Routing& r, const RouterOptions& o,
                         const std::vector<double>& counts, int64_t total_tokens, int64_t B) {
  BalanceLoss out;
  if (!balancing_on(o) || o.aux_loss_coeff == 0.0f) return out;
  const int64_t E = o.num_experts, k = o.topk, T = r.tokens;
  const bool seq = o.balancing == MoeLoadBalancing::SeqAuxLoss;
  // Per sequence: S = total_tokens / B tokens each, the loss averaged over the B sequences.
  const double n = seq ? static_cast<double>(total_tokens / B) : static_cast<double>(total_tokens);
  const double scale =
      o.aux_loss_coeff * static_cast<double>(E) / (static_cast<double>(k) * n * n) / (seq ? B : 1);
  out.dloss_dprob.resize(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) out.dloss_dprob[i] = scale * counts[i];
  double loss = 0;
  for (int64_t t = 0; t < T; ++t) {
    const double* g = out.dloss_dprob.data() + (seq ? (t % B) * E : 0);
    const float* p = r.balance_probs.data() + t * E;
    for (int64_t e = 0; e < E; ++e) loss += g[e] * p[e];
  }
  out.loss = loss;
  return out;
}

double z_loss(const Routing& r, const RouterOptions& o, int64_t total_tokens) {
  if (o.z_loss_coeff == 0.0f) return 0.0;
  double s = 0;
  for (float v : r.lse) s += static_cast<double>(v) * v;
  return o.z_loss_coeff * s / static_cast<double>(total_tokens);
}

int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts, double factor) {
  return static_cast<int64_t>(
      std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(num_experts) * factor));
}

int64_t apply_capacity(std::vector<int32_t>& experts, std::vector<float>& gates,
                       std::vector<uint8_t>& kept, int64_t T, int64_t k, int64_t E,
                       int64_t capacity, MoeTokenDropPolicy policy, float* min_margin) {
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));
  for (int64_t i = 0; i < T * k; ++i)
    if (kept[static_cast<size_t>(i)])
      by_expert[static_cast<size_t>(experts[static_cast<size_t>(i)])].push_back(i);
  int64_t dropped = 0;
  for (auto& slots : by_expert) {
    if (static_cast<int64_t>(slots.size()) <= capacity) continue;
    if (policy == MoeTokenDropPolicy::Probs)
      std::stable_sort(slots.begin(), slots.end(), [&](int64_t a, int64_t b) {
        return gates[static_cast<size_t>(a)] > gates[static_cast<size_t>(b)];
      });
    if (policy == MoeTokenDropPolicy::Probs && min_margin != nullptr && capacity > 0) {
      std::vector<float> sorted(slots.size());
      for (size_t j = 0; j < slots.size(); ++j) sorted[j] = gates[static_cast<size_t>(slots[j])];
      *min_margin = std::min(
          *min_margin, boundary_gap(sorted.data(), static_cast<int64_t>(sorted.size()), capacity));
    }
    for (size_t j = static_cast<size_t>(capacity); j < slots.size(); ++j) {
      gates[static_cast<size_t>(slots[j])] = 0.0f;
      kept[static_cast<size_t>(slots[j])] = 0;
      ++dropped;
    }
  }
  return dropped;
}

void router_backward(const Routing& r, const RouterOptions& o, const float* d_gates,
                     const BalanceLoss& balance, float balance_weight, float z_weight,
                     int64_t total_tokens, int64_t B, float* d_logits) {
  const int64_t E = o.num_experts, k = o.topk, T = r.tokens;
  const bool seq = o.balancing == MoeLoadBalancing::SeqAuxLoss;
  std::vector<double> d_score(static_cast<size_t>(E));
  std::vector<float> probs(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = r.logits.data() + t * E;
    const int32_t* picked = r.experts.data() + t * k;
    const uint8_t* kept = r.kept.data() + t * k;
    const float* dg = d_gates + t * k;
    float* dl = d_logits + t * E;
    std::fill(dl, dl + E, 0.0f);
    std::fill(d_score.begin(), d_score.end(), 0.0);
    const double c = o.scaling_factor;
    if (o.score == MoeScoreFunction::Sigmoid) {
      const float* s = r.scores.data() + t * E;
      if (k > 1) {
        double z = 0, dot = 0;
        for (int64_t j = 0; j < k; ++j) z += s[picked[j]];
        z += 1e-20;
        for (int64_t j = 0; j < k; ++j)
          if (kept[j]) dot += static_cast<double>(dg[j]) * s[picked[j]];
        for (int64_t j = 0; j < k; ++j)
          d_score[static_cast<size_t>(picked[j])] =
              c * ((kept[j] ? dg[j] : 0.0) / z - dot / (z * z));
      } else if (kept[0]) {
        d_score[static_cast<size_t>(picked[0])] = c * dg[0];
      }
    } else if (o.pre_softmax) {
      for (int64_t j = 0; j < k; ++j)
        if (kept[j]) d_score[static_cast<size_t>(picked[j])] = c * dg[j];
    } else {
      // gate_j = c * q_j, q = softmax over the picked logits.
      const float* q = r.picked_probs.data() + t * k;
      double dot = 0;
      for (int64_t j = 0; j < k; ++j)
        if (kept[j]) dot += static_cast<double>(dg[j]) * q[j];
      for (int64_t j = 0; j < k; ++j)
        dl[picked[j]] += static_cast<float>(c * q[j] * ((kept[j] ? dg[j] : 0.0) - dot));
    }
    // The balancing loss: dloss/dP through P's definition.
    const bool balance_on = balance_weight != 0.0f && !balance.dloss_dprob.empty();
    std::vector<double> d_prob;  // dloss/dP for softmax P (added to logits below)
    if (balance_on) {
      const double* g = balance.dloss_dprob.data() + (seq ? (t % B) * E : 0);
      const float* p = r.balance_probs.data() + t * E;
      if (o.score == MoeScoreFunction::Sigmoid) {
        // P = s / (sum s + eps): ds_j = (g_j - sum_i g_i P_i) / (sum s + eps)
        const float* s = r.scores.data() + t * E;
        double z = 0, dot = 0;
        for (int64_t e = 0; e < E; ++e) z += s[e];
        z += 1e-20;
        for (int64_t e = 0; e < E; ++e) dot += g[e] * p[e];
        for (int64_t e = 0; e < E; ++e)
          d_score[static_cast<size_t>(e)] += balance_weight * (g[e] - dot) / z;
      } else {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += g[e] * p[e];
        for (int64_t e = 0; e < E; ++e)
          dl[e] += static_cast<float>(balance_weight * p[e] * (g[e] - dot));
      }
    }
    // Scores -> logits.
    if (o.score == MoeScoreFunction::Sigmoid) {
      const float* s = r.scores.data() + t * E;
      for (int64_t e = 0; e < E; ++e)
        dl[e] += static_cast<float>(d_score[static_cast<size_t>(e)] * s[e] * (1.0 - s[e]));
    } else if (o.pre_softmax) {
      const float* p = r.scores.data() + t * E;
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += d_score[static_cast<size_t>(e)] * p[e];
      for (int64_t e = 0; e < E; ++e)
        dl[e] += static_cast<float>(p[e] * (d_score[static_cast<size_t>(e)] - dot));
    }
    if (z_weight != 0.0f && o.z_loss_coeff > 0.0f) {
      softmax_row(l, E, probs.data(), nullptr);
      const double f = z_weight * o.z_loss_coeff * 2.0 * r.lse[static_cast<size_t>(t)] /
                       static_cast<double>(total_tokens);
      for (int64_t e = 0; e < E; ++e)
        dl[e] += static_cast<float>(f * probs[static_cast<size_t>(e)]);
    }
  }
}

}  // namespace megatron::moe
