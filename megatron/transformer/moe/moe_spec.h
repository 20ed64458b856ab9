#pragma once
// What an MoE layer is built from (MoeSpec, from the recipe's model.moe_* keys) and what the MoE
// layers of one rank share with the trainer (MoeState): the weight of the router losses in the
// step's objective, the per-step routing statistics and the experts' bias of aux-loss-free
// balancing.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "megatron/config/moe_config.h"
#include "megatron/transformer/moe/router.h"

namespace megatron::parallel {
class Communicator;
}

namespace megatron::moe {

// The process groups an MoE layer talks over (null: a group of one; expert_tp null: the dense tp).
struct MoeGroups {
  parallel::Communicator* ep = nullptr;         // expert parallel: the all-to-all
  parallel::Communicator* expert_tp = nullptr;  // the experts' tensor parallel group
  parallel::Communicator* dp = nullptr;         // data parallel: global_aux_loss's counts
  // Context parallel: each rank routes its chunks of every sequence, so the balancing counts
  // and token totals are summed over it (null or one rank: none).
  parallel::Communicator* cp = nullptr;
};

struct MoeSpec {
  RouterOptions router;
  int64_t expert_ffn = 0;    // each expert's MLP width (all tensor-parallel ranks together)
  int64_t shared_ffn = 0;    // shared expert width; 0 = none
  bool shared_gate = false;  // the shared expert's output scaled by a per-token sigmoid gate
  config::LayerFrequency layers;
  std::optional<double> capacity_factor;  // unset: dropless
  config::MoeTokenDropPolicy drop_policy = config::MoeTokenDropPolicy::Probs;
  bool pad_to_capacity = false;
  bool expert_bias = false;
  float bias_update_rate = 0.0f;
  // Linear biases (model.add_bias; Megatron-Core's add_bias_linear): the router's logits and each
  // expert's fc1 and fc2 (GPT-OSS's router and experts).
  bool linear_bias = false;

  bool is_moe_layer(int64_t layer) const { return layers.is_moe(layer); }
};

// From the model section (num_experts > 0); linear_bias: model.add_bias.
MoeSpec moe_spec_from_config(const config::MoeConfig& c, int64_t dense_ffn,
                             bool linear_bias = false);

// One layer's routing statistics summed over this rank's training micro-batches of a step
// (tokens of this rank: with sequence parallelism its sequence slices, else every token).
struct MoeLayerStats {
  double aux_loss = 0, z_loss = 0;        // the losses' values (coefficients applied), partial sums
  std::vector<double> tokens_per_expert;  // picked (before capacity drops), [num_experts]
  double dropped = 0, routed = 0;         // (token, expert) pairs dropped / picked
  // The smallest Routing::min_margin of the step's micro-batches (capacity drops included).
  double min_routing_margin = std::numeric_limits<double>::infinity();
};

// Wall time of this rank's MoE layers (forward + backward), by part, since the last take:
// routing (router GEMM, top-k, losses), dispatch (token/routing gathers over tp, the plan's
// count exchange, the all-to-all to the experts), experts (their GEMMs and activations), combine
// (the all-to-all back, the tp reduction, the gated sum) and the same parts' backward.
struct MoeTimes {
  double router = 0, dispatch = 0, experts = 0, combine = 0;
};

class MoeState {
 public:
  explicit MoeState(const MoeSpec& spec) : spec_(spec) {}
  const MoeSpec& spec() const { return spec_; }

  // d(objective)/d(router loss) of every micro-batch's aux and z losses: the loss scale over the
  // micro-batches of the whole global batch (set by the trainer before each step).
  float loss_weight() const { return loss_weight_; }
  void set_loss_weight(float w) { loss_weight_ = w; }

  // The aux + z losses (coefficients applied) of every MoE forward since the last take: what
  // the router adds to the objective (per micro-batch, before loss_weight()).
  void add_forward_loss(double v) { forward_loss_ += v; }
  double take_forward_loss() { return std::exchange(forward_loss_, 0.0); }

  MoeTimes& times() { return times_; }
  MoeTimes take_times() { return std::exchange(times_, MoeTimes{}); }

  MoeLayerStats& stats(int64_t layer);
  std::map<int64_t, MoeLayerStats>& all_stats() { return stats_; }
  void reset_stats() { stats_.clear(); }

  // Aux-loss-free balancing: the bias added to layer's scores for the choice ([num_experts],
  // zeros at first). Updated by the trainer once per step from the global counts.
  std::vector<float>& expert_bias(int64_t layer);
  std::map<int64_t, std::vector<float>>& all_expert_bias() { return bias_; }

  // global_aux_loss (Megatron's running mean of the counts): layer's balancing counts of the
  // training micro-batches of `iteration` seen so far (each summed over data parallelism), keyed
  // by the micro-batch's batch_offset, which grows with each rank's micro-batches. A new
  // iteration starts empty; a recomputed forward finds its micro-batch's entry.
  std::map<int64_t, std::vector<double>>& global_counts(int64_t layer, int64_t iteration);
  // The mean of layer's entries up to and including batch_offset.
  std::vector<double> mean_global_counts(int64_t layer, int64_t batch_offset) const;

 private:
  struct GlobalCounts {
    int64_t iteration = -1;
    std::map<int64_t, std::vector<double>> by_micro_batch;
  };
  MoeSpec spec_;
  float loss_weight_ = 0.0f;
  double forward_loss_ = 0.0;
  MoeTimes times_;
  std::map<int64_t, MoeLayerStats> stats_;
  std::map<int64_t, std::vector<float>> bias_;
  std::map<int64_t, GlobalCounts> global_;
};

}  // namespace megatron::moe
