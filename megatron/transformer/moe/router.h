#pragma once
// The MoE router's arithmetic over fp32 host arrays (Megatron-Core's TopKRouter and
// topk_softmax_with_capacity): scores, top-k with optional group limit and expert bias, gates,
// capacity drops, the load-balancing and z losses, and the backward of all of them to the router
// logits. Tokens are sequence-major (token t = s * B + b), as the activations.
//
// Scores and gates (k = topk, c = moe_router_topk_scaling_factor or 1):
//   softmax, pre_softmax:  p = softmax(logits) over all experts; pick top-k of p (+ bias);
//                          gate = c * p[picked]
//   softmax (post):        pick top-k of logits; gate = c * softmax(logits[picked])
//   sigmoid:               s = sigmoid(logits); pick top-k of s (+ bias);
//                          gate = c * s[picked] / (sum s[picked] + 1e-20)  (k > 1; else c * s)
// Group-limited routing (num_groups > 0): experts form num_groups equal groups; a group scores
// the sum of its best k / group_topk choice values; only experts of the best group_topk groups
// are picked. Ties go to the lower index everywhere, so routing is deterministic.
//
// Load balancing (Megatron's switch loss), over the micro-batch's T tokens (all tensor-parallel
// slices together) with P = softmax(logits) (sigmoid: s / sum s) over all experts and c_e the
// tokens whose plain top-k over P includes e:
//   aux_loss      coeff * E / (k T^2) * sum_e c_e * sum_t P[t, e]
//   seq_aux_loss  the same per sequence (T -> S, counts per sequence), averaged over sequences
//   global_aux_loss  aux_loss with c_e and T over the micro-batch of every data-parallel rank,
//                 c_e averaged over the step's micro-batches so far (the MoE layer gathers them)
// z-loss: coeff / T * sum_t logsumexp(logits_t)^2.
#include <cstdint>
#include <limits>
#include <vector>

#include "megatron/config/options.h"

namespace megatron::moe {

struct RouterOptions {
  int64_t num_experts = 0, topk = 1;
  config::MoeScoreFunction score = config::MoeScoreFunction::Softmax;
  bool pre_softmax = false;
  int64_t num_groups = 0, group_topk = 0;  // 0: no group limit
  float scaling_factor = 1.0f;
  config::MoeLoadBalancing balancing = config::MoeLoadBalancing::None;
  float aux_loss_coeff = 0.0f, z_loss_coeff = 0.0f;
};

// The routing of this rank's tokens, with what backward needs.
struct Routing {
  int64_t tokens = 0;                // T_local
  std::vector<float> logits;         // [T, E]
  std::vector<int32_t> experts;      // [T, k] picked experts (descending choice value)
  std::vector<float> gates;          // [T, k] (0 where dropped by capacity)
  std::vector<uint8_t> kept;         // [T, k] 1 unless dropped by capacity
  std::vector<float> scores;         // [T, E] softmax (pre) or sigmoid values; empty for post
  std::vector<float> picked_probs;   // [T, k] post-softmax: softmax over the picked logits
  std::vector<float> balance_probs;  // [T, E] P of the load-balancing loss (when it is on)
  std::vector<float> lse;            // [T] log-sum-exp of the logits (z-loss on)
  // How close the choice came to a tie, over all tokens: the smallest gap between the picked
  // choice values and those left out (with a group limit, also between picked and unpicked
  // groups' scores; exact ties, broken by index, count by the next distinct value). +inf when
  // nothing was left out. Two runs whose router inputs differ by round-off route alike only
  // where this gap exceeds that round-off.
  float min_margin = std::numeric_limits<float>::infinity();
};

// Scores, choice, top-k and gates of T tokens. logits [T, E]; expert_bias [E] or null (added to
// the scores for the choice only).
Routing route(const float* logits, int64_t tokens, const RouterOptions& opt,
              const float* expert_bias);

// Tokens per expert whose plain top-k over the balancing probabilities P includes it: [E] for
// aux_loss, [B, E] for seq_aux_loss (this rank's tokens; the caller sums over the tokens'
// other tensor-parallel slices). batch = B.
std::vector<double> balance_counts(const Routing& r, const RouterOptions& opt, int64_t batch);

// The load-balancing loss of this rank's tokens given the counts of the whole micro-batch
// (summed over tensor-parallel slices; global_aux_loss: over dp ranks too, averaged over the
// step's micro-batches) and its token count (global_aux_loss: of every dp rank): a partial sum
// whose sum over the slices is the micro-batch's loss. Also the gradient coefficients dloss/dP[t,
// e] (per expert, or per sequence and expert) for backward.
struct BalanceLoss {
  double loss = 0;
  std::vector<double> dloss_dprob;  // [E] or [B, E]
};
BalanceLoss balance_loss(const Routing& r, const RouterOptions& opt,
                         const std::vector<double>& counts, int64_t total_tokens, int64_t batch);

// The z-loss of this rank's tokens over total_tokens (a partial sum, like balance_loss).
double z_loss(const Routing& r, const RouterOptions& opt, int64_t total_tokens);

// Capacity: ceil(T * k / E * factor) slots per expert (Megatron's get_capacity).
int64_t expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts, double factor);
// Drops the (token, slot) pairs beyond each expert's capacity from experts/gates of T tokens:
// keeps the highest gates (probs; ties to the lower token) or the first tokens (position).
// Returns how many pairs were dropped. With the probs policy, *min_margin (when given) is lowered
// to the smallest gap between an expert's last kept gate and its first dropped one.
int64_t apply_capacity(std::vector<int32_t>& experts, std::vector<float>& gates,
                       std::vector<uint8_t>& kept, int64_t tokens, int64_t topk,
                       int64_t num_experts, int64_t capacity, config::MoeTokenDropPolicy policy,
                       float* min_margin = nullptr);

// d logits [T, E] (written) from the gates' gradient d_gates [T, k] (0 where dropped), plus the
// balancing loss (weight balance_weight, dloss_dprob from balance_loss) and the z-loss (weight
// z_weight, total_tokens as in z_loss).
void router_backward(const Routing& r, const RouterOptions& opt, const float* d_gates,
                     const BalanceLoss& balance, float balance_weight, float z_weight,
                     int64_t total_tokens, int64_t batch, float* d_logits);

}  // namespace megatron::moe
