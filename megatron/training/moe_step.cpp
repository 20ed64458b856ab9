#include "megatron/training/moe_step.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "megatron/optimizer/optimizer.h"

namespace megatron::training {
namespace {

void all_reduce(parallel::Communicator& c, std::vector<double>& v, parallel::ReduceOp op,
                Device device) {
  if (c.size() == 1 || v.empty()) return;
  Tensor t = Tensor::wrap(v.data(), {static_cast<int64_t>(v.size())}, DType::F64);
  optim::all_reduce_host(c, t, op, device);
}

}  // namespace

void finish_moe_step(moe::MoeState& state, const MoeStepGroups& g, int64_t micro_batches,
                     StepMetrics& m) {
  const moe::MoeSpec& spec = state.spec();
  const int64_t E = spec.router.num_experts;
  // [aux, z, dropped, routed] and every local layer's counts, in one reduction per group.
  std::vector<double> sums(4, 0.0), counts;
  // Negated, so that it rides in the pp Max with the imbalance (min(a,b) = -max(-a,-b)).
  std::vector<double> neg_margin{-std::numeric_limits<double>::infinity()};
  std::vector<int64_t> layers;
  for (auto& [layer, st] : state.all_stats()) {
    neg_margin[0] = std::max(neg_margin[0], -st.min_routing_margin);
    sums[0] += st.aux_loss;
    sums[1] += st.z_loss;
    sums[2] += st.dropped;
    sums[3] += st.routed;
    layers.push_back(layer);
    counts.insert(counts.end(), st.tokens_per_expert.begin(), st.tokens_per_expert.end());
  }
  state.reset_stats();
  (void)state.take_forward_loss();  // the forward-side sum is for tests; start each step at 0
  // Sequence-parallel slices hold partial losses and counts; without it every tp rank saw all
  // tokens (the same values).
  if (g.sequence_parallel) {
    all_reduce(*g.tp, sums, parallel::ReduceOp::Sum, g.device);
    all_reduce(*g.tp, counts, parallel::ReduceOp::Sum, g.device);
    all_reduce(*g.tp, neg_margin, parallel::ReduceOp::Max, g.device);
  }
  // Context-parallel ranks likewise hold partial losses and counts of every sequence.
  if (g.cp != nullptr && g.cp->size() > 1) {
    all_reduce(*g.cp, sums, parallel::ReduceOp::Sum, g.device);
    all_reduce(*g.cp, counts, parallel::ReduceOp::Sum, g.device);
    all_reduce(*g.cp, neg_margin, parallel::ReduceOp::Max, g.device);
  }
  all_reduce(*g.dp, sums, parallel::ReduceOp::Sum, g.device);
  all_reduce(*g.dp, neg_margin, parallel::ReduceOp::Max, g.device);
  all_reduce(*g.dp, counts, parallel::ReduceOp::Sum, g.device);
  // Per layer: the global batch's tokens per expert.
  double imbalance = 0.0;
  std::vector<double> per_layer(static_cast<size_t>(g.num_layers), 0.0);
  for (size_t i = 0; i < layers.size(); ++i) {
    const double* c = counts.data() + i * static_cast<size_t>(E);
    double total = 0, most = 0;
    for (int64_t e = 0; e < E; ++e) {
      total += c[e];
      most = std::max(most, c[e]);
    }
    const double mean = total / static_cast<double>(E);
    if (mean > 0) imbalance = std::max(imbalance, most / mean);
    if (mean > 0 && layers[i] < g.num_layers)
      per_layer[static_cast<size_t>(layers[i])] = most / mean;
    if (spec.expert_bias) {
      std::vector<float>& bias = state.expert_bias(layers[i]);
      for (int64_t e = 0; e < E; ++e) {
        const double diff = mean - c[e];
        const float sign = diff > 0 ? 1.0f : diff < 0 ? -1.0f : 0.0f;
        bias[static_cast<size_t>(e)] += spec.bias_update_rate * sign;
      }
    }
  }
  // The stages hold different layers.
  all_reduce(*g.pp, sums, parallel::ReduceOp::Sum, g.device);
  std::vector<double> worst{imbalance, neg_margin[0]};
  all_reduce(*g.pp, worst, parallel::ReduceOp::Max, g.device);
  m.moe_min_routing_margin = -worst[1];
  all_reduce(*g.pp, per_layer, parallel::ReduceOp::Sum, g.device);  // each layer lives on one stage
  m.moe_layer_imbalance = std::move(per_layer);
  m.has_moe = true;
  // global_aux_loss: the dp ranks' partial losses add up to one loss per micro-batch index.
  const bool global = spec.router.balancing == config::MoeLoadBalancing::GlobalAuxLoss;
  m.moe_aux_loss = sums[0] / static_cast<double>(micro_batches) *
                   (global ? static_cast<double>(g.dp->size()) : 1.0);
  m.moe_z_loss = sums[1] / static_cast<double>(micro_batches);
  m.moe_dropped_fraction = sums[3] > 0 ? sums[2] / sums[3] : 0.0;
  m.moe_load_imbalance = worst[0];
}

}  // namespace megatron::training
