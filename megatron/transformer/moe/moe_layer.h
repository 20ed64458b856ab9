#pragma once
// The mixture-of-experts MLP (Megatron-Core's MoELayer) behind the block's MlpLayer interface:
// router -> token dispatch over the expert-parallel group -> grouped experts -> dispatch back ->
// combine with the gates (+ the shared expert, when configured).
//
// Data flow of one micro-batch (Tl = this rank's tokens: a sequence slice with sequence
// parallelism, else the whole micro-batch; T = the micro-batch's tokens):
//  1. The router runs in fp32 on the Tl local tokens: logits = x W^T, routing (router.h); the
//     load-balancing counts are summed over the tensor-parallel slices so the losses and their
//     gradients do not depend on tp (each slice adds its partial loss; the router weight's
//     gradient is then a tensor-parallel partial sum, like a sequence-parallel norm's).
//  2. With sequence parallelism the tokens and their routing are all-gathered over tp; capacity
//     drops are decided on all T tokens (identically on every tp rank).
//  3. Rows go to their experts' ranks (token_dispatcher.h); each expert is split over tp like
//     the dense MLP, so the returned rows are tp partial sums, reduce-scattered (sequence
//     parallel) or all-reduced over tp per (token, slot) in fp32. With whole experts
//     (parallel.expert_tensor 1 under tp > 1, sequence parallel; ep then spans tp ranks) each
//     rank dispatches only its own Tl tokens and gets complete rows back: no tp traffic.
//  4. out_t = sum_j gate[t, j] * expert_row[t, j] (+ shared expert).
// Backward mirrors it; the aux and z losses enter the router's backward with
// MoeState::loss_weight(). The routing decisions are made on the host ([tokens, experts] is
// small): on a device the router logits come to the host and the gates, kept flags and row
// indices go back as tensors; every row moves, combines and sums by device ops, so the same code
// runs on the CPU (without copies) and on CUDA. Statistics are recorded in backward, so a
// recomputed forward (full recompute) and evaluation count nothing.
#include <memory>

#include "megatron/transformer/layers.h"
#include "megatron/transformer/mlp.h"
#include "megatron/transformer/moe/experts.h"
#include "megatron/transformer/moe/moe_spec.h"
#include "megatron/transformer/moe/shared_expert.h"
#include "megatron/transformer/moe/token_dispatcher.h"
#include "megatron/transformer/submodules.h"

namespace megatron::moe {

class MoELayer final : public MlpLayer {
 public:
  struct State final : LayerState {
    Routing routing;  // local tokens (gates and kept after capacity drops)
    BalanceLoss balance;
    double z = 0;
    int64_t total_tokens = 0, batch = 0;
    int64_t loss_tokens = 0;                // what the z loss averages over: total_tokens x cp
    std::vector<double> picked_per_expert;  // local picks before drops
    double dropped = 0;
    DispatchPlan plan;
    Tensor x32, logits;                  // [Tl, D], [Tl, E] fp32
    Tensor router_w32;                   // the router weight in fp32 (forward and backward)
    Tensor router_b32;                   // its bias in fp32 (MoeSpec::linear_bias)
    Tensor rows, expert_out, slot_rows;  // expert-major in/out, [T*k, D] returned rows
    Tensor slot32;                       // [Tl*k, D] fp32 expert outputs (tp-reduced)
    Tensor gates;                        // [Tl*k] fp32 on the device (0 where dropped)
    Tensor out;                          // [Sl, B, D]
    GroupedExperts::State experts;
    SharedExpert::State shared;
    Tensor d_slot32, d_gates, d_slot, d_expert_out, d_rows, dx_full32, dx32, dlogits;
  };

  // groups.ep and groups.expert_tp set (expert_tp: args.tp, or folded a group of one).
  MoELayer(const SubmoduleArgs& args, const MoeGroups& groups, std::shared_ptr<MoeState> state);

  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<State>(); }
  bool owns(const LayerState& s) const override { return typeid(s) == typeid(State); }
  Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb) const override;
  void backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                const MicroBatchInfo& mb) const override;
  void collect_params(std::vector<Parameter*>& out) const override;

 private:
  DType act() const { return spec_.activation_dtype; }
  int64_t tp_token_offset(int64_t local_tokens) const;
  // Forward's steps: the router on this rank's tokens (routing, balancing counts and losses);
  // the routing of every token the experts see (gathered over tp) with capacity drops; the
  // dispatch, the experts and their rows back (s.slot32).
  void route_tokens(State& s, const Tensor& in, const MicroBatchInfo& mb) const;
  struct AllRouting {
    std::vector<int32_t> experts;
    std::vector<float> gates;
    std::vector<uint8_t> kept;
    int64_t capacity = 0;
  };
  AllRouting all_routing(State& s, const MicroBatchInfo& mb) const;
  // Capacity drops under context parallelism: decided on the whole sequences (every cp rank's
  // routing gathered in the global token order), as one process decides them.
  void apply_capacity_over_cp(AllRouting& all, State& s, const MicroBatchInfo& mb) const;
  void run_experts(State& s, const Tensor& in, const MicroBatchInfo& mb) const;

  TransformerSpec spec_;
  std::shared_ptr<MoeState> moe_;
  int64_t layer_;
  Device device_;
  parallel::Communicator* tp_;
  bool sp_;
  bool fold_;                   // experts whole under tp > 1: each rank dispatches its own tokens
  parallel::Communicator* dp_;  // global_aux_loss's counts are summed over it (null: none)
  parallel::Communicator* cp_;  // context parallel (null: none): counts summed over it too
  Parameter* router_ = nullptr;
  Parameter* router_bias_ = nullptr;  // MoeSpec::linear_bias
  std::unique_ptr<TokenDispatcher> dispatcher_;
  std::unique_ptr<GroupedExperts> experts_;
  std::unique_ptr<SharedExpert> shared_;
};

}  // namespace megatron::moe

namespace megatron::moe {

// Self-attention and, per layer, the MoE layer where the spec's moe_layer_freq says so (else the
// dense MLP). groups.ep and groups.expert_tp must be set; the groups and state outlive the
// blocks built from it.
BlockSubmodules moe_submodules(const MoeGroups& groups, std::shared_ptr<MoeState> state);

}  // namespace megatron::moe
