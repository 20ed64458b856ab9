// The MoE router (megatron/transformer/moe/router.h) against a naive reference written from the
// formulas (full sorts, double precision), and its backward against finite differences of the
// gates, the load-balancing loss and the z-loss.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "megatron/transformer/moe/router.h"

namespace megatron::moe {
namespace {

using config::MoeLoadBalancing;
using config::MoeScoreFunction;
using config::MoeTokenDropPolicy;

std::vector<float> random_logits(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Indices sorted by value descending, ties to the lower index (a full sort).
std::vector<int> ranked(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] > v[b]; });
  return idx;
}

struct RefToken {
  std::vector<int> experts;
  std::vector<double> gates;
  double margin = INFINITY;  // the gap to the nearest tie of the choice (and of the groups)
};

RefToken reference_token(const float* l, const RouterOptions& o, const float* bias) {
  const int E = static_cast<int>(o.num_experts), k = static_cast<int>(o.topk);
  std::vector<double> logit(l, l + E), soft(E), sig(E), choice(E);
  double m = *std::max_element(logit.begin(), logit.end()), z = 0;
  for (int e = 0; e < E; ++e) z += std::exp(logit[e] - m);
  for (int e = 0; e < E; ++e) soft[e] = std::exp(logit[e] - m) / z;
  for (int e = 0; e < E; ++e) sig[e] = 1.0 / (1.0 + std::exp(-logit[e]));
  const bool sigmoid = o.score == MoeScoreFunction::Sigmoid;
  for (int e = 0; e < E; ++e)
    choice[e] = (sigmoid ? sig[e] : o.pre_softmax ? soft[e] : logit[e]) + (bias ? bias[e] : 0.0);
  double margin = INFINITY;
  if (o.num_groups > 0) {
    const int G = static_cast<int>(o.num_groups), per = E / G;
    const int best = k / static_cast<int>(o.group_topk);
    std::vector<double> gscore(G);
    for (int g = 0; g < G; ++g) {
      std::vector<double> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(members.rbegin(), members.rend());
      gscore[g] = std::accumulate(members.begin(), members.begin() + best, 0.0);
    }
    const std::vector<int> gorder = ranked(gscore);
    if (o.group_topk < G) margin = gscore[gorder[o.group_topk - 1]] - gscore[gorder[o.group_topk]];
    std::vector<bool> keep(G, false);
    for (int j = 0; j < o.group_topk; ++j) keep[gorder[j]] = true;
    for (int e = 0; e < E; ++e)
      if (!keep[e / per]) choice[e] = -1e300;
  }
  RefToken r;
  const std::vector<int> order = ranked(choice);
  r.experts.assign(order.begin(), order.begin() + k);
  if (k < E && choice[order[k]] > -1e299)
    margin = std::min(margin, choice[order[k - 1]] - choice[order[k]]);
  r.margin = margin;
  if (sigmoid) {
    double s = 0;
    for (int e : r.experts) s += sig[e];
    for (int e : r.experts) r.gates.push_back(k > 1 ? sig[e] / (s + 1e-20) : sig[e]);
  } else if (o.pre_softmax) {
    for (int e : r.experts) r.gates.push_back(soft[e]);
  } else {
    double mm = -1e300, s = 0;
    for (int e : r.experts) mm = std::max(mm, logit[e]);
    for (int e : r.experts) s += std::exp(logit[e] - mm);
    for (int e : r.experts) r.gates.push_back(std::exp(logit[e] - mm) / s);
  }
  for (double& g : r.gates) g *= o.scaling_factor;
  return r;
}

struct Case {
  const char* name;
  RouterOptions opt;
  bool bias;
};

std::vector<Case> cases() {
  auto base = [](int64_t E, int64_t k) {
    RouterOptions o;
    o.num_experts = E;
    o.topk = k;
    return o;
  };
  std::vector<Case> out;
  out.push_back({"softmax_post_top2", base(8, 2), false});
  RouterOptions pre = base(8, 2);
  pre.pre_softmax = true;
  out.push_back({"softmax_pre_top2", pre, false});
  out.push_back({"softmax_pre_bias", pre, true});
  RouterOptions sig = base(8, 3);
  sig.score = MoeScoreFunction::Sigmoid;
  out.push_back({"sigmoid_top3", sig, false});
  out.push_back({"sigmoid_bias", sig, true});
  RouterOptions sig1 = base(6, 1);
  sig1.score = MoeScoreFunction::Sigmoid;
  out.push_back({"sigmoid_top1", sig1, false});
  RouterOptions grouped = base(16, 4);
  grouped.score = MoeScoreFunction::Sigmoid;
  grouped.num_groups = 4;
  grouped.group_topk = 2;
  grouped.scaling_factor = 2.5f;
  out.push_back({"sigmoid_groups_scaled", grouped, true});
  RouterOptions gsoft = base(12, 2);
  gsoft.num_groups = 3;
  gsoft.group_topk = 1;
  out.push_back({"softmax_post_groups", gsoft, false});
  return out;
}

TEST(MoeRouter, MatchesTheNaiveReference) {
  const int64_t T = 37;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const int64_t E = c.opt.num_experts, k = c.opt.topk;
    const std::vector<float> logits = random_logits(T * E, 7);
    const std::vector<float> bias = random_logits(E, 11);
    const Routing r = route(logits.data(), T, c.opt, c.bias ? bias.data() : nullptr);
    double margin = INFINITY;
    for (int64_t t = 0; t < T; ++t) {
      const RefToken ref =
          reference_token(logits.data() + t * E, c.opt, c.bias ? bias.data() : nullptr);
      margin = std::min(margin, ref.margin);
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(r.experts[static_cast<size_t>(t * k + j)], ref.experts[static_cast<size_t>(j)])
            << "token " << t << " slot " << j;
        EXPECT_NEAR(r.gates[static_cast<size_t>(t * k + j)], ref.gates[static_cast<size_t>(j)],
                    2e-6);
      }
    }
    // How near the choice came to a tie: a real gap here (random logits), found to round-off.
    ASSERT_TRUE(std::isfinite(margin));
    EXPECT_GT(margin, 0.0);
    EXPECT_NEAR(r.min_margin, margin, 1e-6);
  }
}

// A near-tie shows as its gap; an exact tie (broken by index alike in every run) by the gap to
// the next distinct value; with every expert picked nothing is left out (+inf).
TEST(MoeRouter, MarginMeasuresTheNearestTie) {
  RouterOptions o;
  o.num_experts = 3;
  o.topk = 1;
  const std::vector<float> tied = {0.5f, 2.0f, 2.0f, 1.0f, 0.0f, 0.25f};
  EXPECT_EQ(route(tied.data(), 2, o, nullptr).min_margin, 0.75f);  // token 1: 1.0 over 0.25
  const std::vector<float> tied3 = {1.5f, 2.0f, 2.0f};
  EXPECT_EQ(route(tied3.data(), 1, o, nullptr).min_margin, 0.5f);
  const std::vector<float> near = {0.5f, 2.0f, 1.75f, 1.0f, 0.0f, 0.25f};
  EXPECT_EQ(route(near.data(), 2, o, nullptr).min_margin, 0.25f);
  o.topk = 3;
  EXPECT_TRUE(std::isinf(route(near.data(), 2, o, nullptr).min_margin));
}

// aux = coeff * E * sum_i f_i * P_i, f_i = c_i / (k T), P_i the mean softmax probability, with
// c_i from a plain top-k over the probabilities; the partial losses of two token slices (with the
// slices' summed counts) add up to the whole.
TEST(MoeRouter, AuxLossIsTheSwitchFormulaAndSplitsOverSlices) {
  RouterOptions o;
  o.num_experts = 6;
  o.topk = 2;
  o.balancing = MoeLoadBalancing::AuxLoss;
  o.aux_loss_coeff = 0.01f;
  const int64_t T = 40, E = 6, B = 4;
  const std::vector<float> logits = random_logits(T * E, 3);
  const Routing r = route(logits.data(), T, o, nullptr);
  const std::vector<double> counts = balance_counts(r, o, B);
  const BalanceLoss whole = balance_loss(r, o, counts, T, B);
  std::vector<double> c(E, 0), P(E, 0);
  for (int64_t t = 0; t < T; ++t) {
    const RefToken ref = [&] {
      RouterOptions pre = o;
      pre.pre_softmax = true;
      return reference_token(logits.data() + t * E, pre, nullptr);
    }();
    for (int e : ref.experts) c[static_cast<size_t>(e)] += 1;
    const float* l = logits.data() + t * E;
    double m = *std::max_element(l, l + E), z = 0;
    for (int64_t e = 0; e < E; ++e) z += std::exp(l[e] - m);
    for (int64_t e = 0; e < E; ++e) P[static_cast<size_t>(e)] += std::exp(l[e] - m) / z / T;
  }
  double expected = 0;
  for (int64_t e = 0; e < E; ++e)
    expected += c[static_cast<size_t>(e)] / (2.0 * T) * P[static_cast<size_t>(e)];
  expected *= 0.01 * E;
  EXPECT_NEAR(whole.loss, expected, 1e-9);
  // Two slices of 20 tokens (5 sequence positions x B 4): counts summed, losses add.
  const Routing a = route(logits.data(), 20, o, nullptr);
  const Routing b = route(logits.data() + 20 * E, 20, o, nullptr);
  std::vector<double> ca = balance_counts(a, o, B), cb = balance_counts(b, o, B);
  for (size_t i = 0; i < ca.size(); ++i) ca[i] += cb[i];
  EXPECT_NEAR(balance_loss(a, o, ca, T, B).loss + balance_loss(b, o, ca, T, B).loss, whole.loss,
              1e-12);
}

TEST(MoeRouter, SeqAuxLossAveragesPerSequenceLosses) {
  RouterOptions o;
  o.num_experts = 4;
  o.topk = 1;
  o.balancing = MoeLoadBalancing::SeqAuxLoss;
  o.aux_loss_coeff = 0.1f;
  const int64_t S = 9, B = 3, E = 4, T = S * B;
  const std::vector<float> logits = random_logits(T * E, 5);
  const Routing r = route(logits.data(), T, o, nullptr);
  const double loss = balance_loss(r, o, balance_counts(r, o, B), T, B).loss;
  // Each sequence b (tokens s * B + b) on its own, as an aux_loss over S tokens.
  RouterOptions per = o;
  per.balancing = MoeLoadBalancing::AuxLoss;
  double mean = 0;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<float> seq;
    for (int64_t s = 0; s < S; ++s)
      seq.insert(seq.end(), logits.begin() + (s * B + b) * E, logits.begin() + (s * B + b + 1) * E);
    const Routing rb = route(seq.data(), S, per, nullptr);
    mean += balance_loss(rb, per, balance_counts(rb, per, 1), S, 1).loss / B;
  }
  EXPECT_NEAR(loss, mean, 1e-12);
}

// J(logits) = sum w * gates + a * balance + z_w * zloss, with the counts held fixed (they are
// piecewise constant). balance_tokens: the balancing loss's token count (global_aux_loss: of
// every data-parallel rank).
double objective(const std::vector<float>& logits, int64_t T, const RouterOptions& o,
                 const float* bias, const std::vector<float>& w, const std::vector<double>& counts,
                 float a, float zw, int64_t B, int64_t balance_tokens) {
  const Routing r = route(logits.data(), T, o, bias);
  double j = 0;
  for (size_t i = 0; i < r.gates.size(); ++i) j += static_cast<double>(w[i]) * r.gates[i];
  j += a * balance_loss(r, o, counts, balance_tokens, B).loss;
  j += zw * z_loss(r, o, T);
  return j;
}

TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  const int64_t T = 12, B = 3;
  for (Case c : cases()) {
    for (MoeLoadBalancing lb : {MoeLoadBalancing::AuxLoss, MoeLoadBalancing::SeqAuxLoss,
                                MoeLoadBalancing::GlobalAuxLoss}) {
      SCOPED_TRACE(std::string(c.name) + " " + std::string(config::option_name(lb)));
      RouterOptions o = c.opt;
      o.balancing = lb;
      o.aux_loss_coeff = 0.3f;
      o.z_loss_coeff = 0.05f;
      const int64_t E = o.num_experts, k = o.topk;
      std::vector<float> logits = random_logits(T * E, 21);
      const std::vector<float> bias = random_logits(E, 23);
      const float* bp = c.bias ? bias.data() : nullptr;
      const std::vector<float> w = random_logits(T * k, 29);
      const Routing r = route(logits.data(), T, o, bp);
      std::vector<double> counts = balance_counts(r, o, B);
      // global_aux_loss: counts averaged with other ranks' and micro-batches' (not integers),
      // over the tokens of two data-parallel ranks.
      const bool global = lb == MoeLoadBalancing::GlobalAuxLoss;
      for (size_t e = 0; global && e < counts.size(); ++e) counts[e] = 0.5 * counts[e] + 2.25 + e;
      const int64_t balance_tokens = global ? 2 * T : T;
      const BalanceLoss bl = balance_loss(r, o, counts, balance_tokens, B);
      EXPECT_NE(bl.loss, 0.0);
      const float a = 0.7f, zw = 1.3f;
      std::vector<float> dl(static_cast<size_t>(T * E));
      router_backward(r, o, w.data(), bl, a, zw, T, B, dl.data());
      double worst = 0, scale = 0;
      for (size_t i = 0; i < logits.size(); ++i) {
        const float keep = logits[i], h = 1e-2f;
        logits[i] = keep + h;
        const double up = objective(logits, T, o, bp, w, counts, a, zw, B, balance_tokens);
        logits[i] = keep - h;
        const double down = objective(logits, T, o, bp, w, counts, a, zw, B, balance_tokens);
        logits[i] = keep;
        const double fd = (up - down) / (2.0 * h);
        worst = std::max(worst, std::abs(fd - dl[i]));
        scale = std::max(scale, std::abs(fd));
      }
      EXPECT_GT(scale, 1e-3);
      EXPECT_LT(worst, 2e-3 * std::max(1.0, scale)) << "scale " << scale;
    }
  }
}

TEST(MoeRouter, CapacityKeepsTheHighestGatesOrTheFirstTokens) {
  // 6 tokens, top-1 over 2 experts: every token picks expert 0; capacity 2.
  std::vector<int32_t> experts = {0, 0, 0, 0, 0, 1};
  const std::vector<float> gates0 = {0.5f, 0.9f, 0.2f, 0.9f, 0.7f, 0.6f};
  std::vector<float> gates = gates0;
  std::vector<uint8_t> kept(6, 1);
  float margin = INFINITY;
  EXPECT_EQ(apply_capacity(experts, gates, kept, 6, 1, 2, 2, MoeTokenDropPolicy::Probs, &margin),
            3);
  EXPECT_EQ(kept, (std::vector<uint8_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(margin, 0.9f - 0.7f);  // expert 0's last kept gate over its first dropped one
  EXPECT_EQ(gates[0], 0.0f);
  EXPECT_EQ(gates[1], 0.9f);
  gates = gates0;
  kept.assign(6, 1);
  EXPECT_EQ(apply_capacity(experts, gates, kept, 6, 1, 2, 2, MoeTokenDropPolicy::Position), 3);
  EXPECT_EQ(kept, (std::vector<uint8_t>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(expert_capacity(6, 1, 2, 1.0), 3);
  EXPECT_EQ(expert_capacity(7, 2, 4, 1.5), 6);  // ceil(14 / 4 * 1.5) = ceil(5.25)
}

}  // namespace
}  // namespace megatron::moe
