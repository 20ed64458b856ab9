#include "megatron/transformer/moe/moe_layer.h"

#include <algorithm>
#include <chrono>

#include "kernels/common/context_chunks.h"
#include "megatron/backend/ops.h"
#include "megatron/tensor_parallel/mappings.h"
#include "megatron/transformer/attention.h"
#include "megatron/transformer/moe/host_collectives.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron::moe {

MoELayer::MoELayer(const SubmoduleArgs& a, const MoeGroups& groups, std::shared_ptr<MoeState> state)
    : spec_(a.spec),
      moe_(std::move(state)),
      layer_(a.layer),
      device_(a.store.device()),
      tp_(&a.tp),
      sp_(a.spec.sequence_parallel && a.tp.size() > 1),
      fold_(groups.expert_tp->size() != a.tp.size()),
      dp_(groups.dp),
      cp_(groups.cp != nullptr && groups.cp->size() > 1 ? groups.cp : nullptr) {
  parallel::Communicator& ep = *groups.ep;
  parallel::Communicator& expert_tp = *groups.expert_tp;
  MT_CHECK(!fold_ || (expert_tp.size() == 1 && sp_), "MoE layer ", a.layer,
           ": experts whole under tensor parallel size ", a.tp.size(),
           " need sequence parallelism and an expert tensor parallel group of one (got ",
           expert_tp.size(), ")");
  const MoeSpec& m = moe_->spec();
  const int64_t E = m.router.num_experts, D = spec_.hidden;
  // The router: replicated over tp; with sequence parallelism each rank routes its slice, so its
  // gradient is a partial sum over tp.
  router_ = &a.store.add(a.prefix + ".mlp.router.weight", Shape{E, D},
                         {ParamInit::Kind::Normal, spec_.init_std}, true);
  router_->tp_partial_grad = sp_;
  if (m.linear_bias) {
    router_bias_ = &a.store.add(a.prefix + ".mlp.router.bias", Shape{E},
                                {ParamInit::Kind::Zeros, 0.0f}, false);
    router_bias_->tp_partial_grad = sp_;
  }
  dispatcher_ = std::make_unique<TokenDispatcher>(ep, E, device_);
  experts_ = std::make_unique<GroupedExperts>(
      a.store, a.prefix, dispatcher_->first_local_expert(), dispatcher_->local_experts(), D,
      m.expert_ffn, spec_.swiglu, expert_tp, spec_.init_std, spec_.output_init_std(), spec_.gelu,
      spec_.glu(), m.linear_bias);
  if (m.shared_ffn > 0)
    shared_ = std::make_unique<SharedExpert>(a, m.shared_ffn, m.shared_gate, sp_);
  // The bias exists from construction on, so a checkpoint load finds this layer's.
  if (m.expert_bias) moe_->expert_bias(layer_);
}

void MoELayer::collect_params(std::vector<Parameter*>& out) const {
  out.push_back(router_);
  if (router_bias_) out.push_back(router_bias_);
  experts_->collect_params(out);
  if (shared_) shared_->collect_params(out);
}

int64_t MoELayer::tp_token_offset(int64_t local_tokens) const {
  return sp_ ? tp_->rank() * local_tokens : 0;
}

namespace {

// Adds the seconds since the last lap to a counter of MoeTimes.
class Lap {
 public:
  Lap() : t_(std::chrono::steady_clock::now()) {}
  void to(double& counter) {
    const auto now = std::chrono::steady_clock::now();
    counter += std::chrono::duration<double>(now - t_).count();
    t_ = now;
  }

 private:
  std::chrono::steady_clock::time_point t_;
};

// An fp32 copy of t in `scratch` (always a copy, unlike context_parallel.cpp's as_f32, which
// aliases an fp32 t).
Tensor f32_copy(const Tensor& t, Tensor& scratch, const Shape& shape) {
  ensure(scratch, shape, DType::F32, t.device());
  ops::cast(t, scratch);
  return scratch;
}

}  // namespace

void MoELayer::route_tokens(State& s, const Tensor& in, const MicroBatchInfo& mb) const {
  const MoeSpec& m = moe_->spec();
  const RouterOptions& ro = m.router;
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden, E = ro.num_experts;
  const int64_t Tl = Sl * B, T = Tl * (sp_ ? tp_->size() : 1);
  Lap lap;
  f32_copy(in, s.x32, {Tl, D});
  f32_copy(router_->weight, s.router_w32, {E, D});
  ensure(s.logits, {Tl, E}, DType::F32, device_);
  if (router_bias_) f32_copy(router_bias_->weight, s.router_b32, {E});
  ops::linear_forward(s.x32, s.router_w32, router_bias_ ? &s.router_b32 : nullptr, s.logits);
  const float* bias = m.expert_bias ? moe_->expert_bias(layer_).data() : nullptr;
  const Tensor logits = s.logits.to(Device::CPU);  // the routing runs on the host
  s.routing = route(logits.data<float>(), Tl, ro, bias);
  s.batch = B;
  s.total_tokens = T;
  std::vector<double> counts = balance_counts(s.routing, ro, B);
  auto sum_over = [&](parallel::Communicator* group) {
    if (group == nullptr) return;
    all_reduce_host(*group,
                    Tensor::wrap(counts.data(), {static_cast<int64_t>(counts.size())}, DType::F64),
                    parallel::ReduceOp::Sum, device_);
  };
  if (sp_) sum_over(tp_);
  // Context parallelism: this rank holds 2 of the 2 cp chunks of every sequence; the losses are
  // those of the whole sequences (each rank's part of them adds up over cp).
  sum_over(cp_);
  const int64_t T_all = T * (cp_ ? cp_->size() : 1);
  s.loss_tokens = T_all;
  int64_t balance_tokens = T_all;
  if (ro.balancing == config::MoeLoadBalancing::GlobalAuxLoss && mb.training) {
    // Megatron's global_aux_loss: the counts of every dp rank's micro-batch, averaged over this
    // step's micro-batches so far; a recomputed forward reuses its micro-batch's counts (no
    // collective), so the loss does not depend on the schedule or recomputation.
    auto& seen = moe_->global_counts(layer_, mb.iteration);
    if (seen.find(mb.batch_offset) == seen.end()) {
      sum_over(dp_);
      seen.emplace(mb.batch_offset, counts);
    }
    counts = moe_->mean_global_counts(layer_, mb.batch_offset);
    balance_tokens = T_all * (dp_ ? dp_->size() : 1);
  }
  s.balance = balance_loss(s.routing, ro, counts, balance_tokens, B);
  s.z = z_loss(s.routing, ro, T_all);
  moe_->add_forward_loss(s.balance.loss + s.z);
  s.picked_per_expert.assign(static_cast<size_t>(E), 0.0);
  for (int32_t e : s.routing.experts) s.picked_per_expert[static_cast<size_t>(e)] += 1.0;
  lap.to(moe_->times().router);
}

MoELayer::AllRouting MoELayer::all_routing(State& s, const MicroBatchInfo& mb) const {
  const MoeSpec& m = moe_->spec();
  const int64_t k = m.router.topk, E = m.router.num_experts;
  const int64_t Tl = s.routing.tokens, T = s.total_tokens;
  AllRouting all;
  // Folded experts dispatch only the local tokens: they need the others' routing only for the
  // capacity decision.
  const bool need_all = !fold_ || m.capacity_factor.has_value();
  if (need_all && sp_) {
    all.experts.resize(static_cast<size_t>(T * k));
    all.gates.resize(all.experts.size());
    all_gather_host(*tp_, Tensor::wrap(s.routing.experts.data(), {Tl * k}, DType::I32),
                    Tensor::wrap(all.experts.data(), {T * k}, DType::I32), device_);
    all_gather_host(*tp_, Tensor::wrap(s.routing.gates.data(), {Tl * k}, DType::F32),
                    Tensor::wrap(all.gates.data(), {T * k}, DType::F32), device_);
  } else if (need_all) {
    all.experts = s.routing.experts;
    all.gates = s.routing.gates;
  }
  all.kept.assign(all.experts.size(), 1);
  if (m.capacity_factor) {
    if (cp_)
      apply_capacity_over_cp(all, s, mb);
    else {
      all.capacity = expert_capacity(T, k, E, *m.capacity_factor);
      apply_capacity(all.experts, all.gates, all.kept, T, k, E, all.capacity, m.drop_policy,
                     &s.routing.min_margin);
    }
    const int64_t off = tp_token_offset(Tl) * k;
    for (int64_t i = 0; i < Tl * k; ++i) {
      s.routing.gates[static_cast<size_t>(i)] = all.gates[static_cast<size_t>(off + i)];
      s.routing.kept[static_cast<size_t>(i)] = all.kept[static_cast<size_t>(off + i)];
    }
  }
  s.dropped = static_cast<double>(std::count(s.routing.kept.begin(), s.routing.kept.end(), 0));
  return all;
}

void MoELayer::apply_capacity_over_cp(AllRouting& all, State& s, const MicroBatchInfo& mb) const {
  // The capacity of the whole sequences, decided on every token in the single process's order:
  // the routing of each cp rank's chunks gathered and placed at their global positions.
  const MoeSpec& m = moe_->spec();
  const int64_t k = m.router.topk, E = m.router.num_experts, T = s.total_tokens, B = s.batch;
  const int64_t cp = cp_->size(), rows = T / B, G = T * cp;
  MT_CHECK(mb.cp.active() && mb.cp.total == rows * cp, "MoE layer ", layer_,
           ": a capacity under context parallelism needs the micro-batch's chunks");
  std::vector<int32_t> experts(static_cast<size_t>(G * k));
  std::vector<float> gates(experts.size());
  all_gather_host(*cp_, Tensor::wrap(all.experts.data(), {T * k}, DType::I32),
                  Tensor::wrap(experts.data(), {G * k}, DType::I32), device_);
  all_gather_host(*cp_, Tensor::wrap(all.gates.data(), {T * k}, DType::F32),
                  Tensor::wrap(gates.data(), {G * k}, DType::F32), device_);
  // The global token of cp rank c's local token (row r, sample b): position chunks_c(r), b.
  std::vector<int64_t> global_token(static_cast<size_t>(G));
  for (int64_t c = 0; c < cp; ++c) {
    const auto chunks = kernels::ContextChunks::of(mb.cp.total, cp, c);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < B; ++b)
        global_token[static_cast<size_t>(c * T + r * B + b)] = chunks.global(r) * B + b;
  }
  std::vector<int32_t> g_experts(experts.size());
  std::vector<float> g_gates(gates.size());
  for (int64_t t = 0; t < G; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t from = static_cast<size_t>(t * k + j);
      const size_t to = static_cast<size_t>(global_token[static_cast<size_t>(t)] * k + j);
      g_experts[to] = experts[from];
      g_gates[to] = gates[from];
    }
  std::vector<uint8_t> g_kept(g_experts.size(), 1);
  all.capacity = expert_capacity(G, k, E, *m.capacity_factor);
  apply_capacity(g_experts, g_gates, g_kept, G, k, E, all.capacity, m.drop_policy,
                 &s.routing.min_margin);
  const int64_t mine = cp_->rank() * T;  // this rank's tokens in the gathered order
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(global_token[static_cast<size_t>(mine + t)] * k + j);
      all.gates[static_cast<size_t>(t * k + j)] = g_gates[at];
      all.kept[static_cast<size_t>(t * k + j)] = g_kept[at];
    }
}

void MoELayer::run_experts(State& s, const Tensor& in, const MicroBatchInfo& mb) const {
  const MoeSpec& m = moe_->spec();
  const int64_t k = m.router.topk, D = spec_.hidden, Tl = s.routing.tokens, T = s.total_tokens;
  MoeTimes& times = moe_->times();
  Lap lap;
  AllRouting all = all_routing(s, mb);
  const int64_t pad_to = m.pad_to_capacity ? all.capacity : 0;
  if (fold_) {
    s.plan = dispatcher_->plan(s.routing.experts.data(), s.routing.kept.data(), Tl, k, D, pad_to);
    dispatcher_->dispatch(s.plan, in.view({Tl, D}), s.rows);
  } else {
    const Tensor x_full = sp_ ? tensor_parallel::gathered_sequence(*tp_, in) : in;
    s.plan = dispatcher_->plan(all.experts.data(), all.kept.data(), T, k, D, pad_to);
    dispatcher_->dispatch(s.plan, x_full.view({T, D}), s.rows);
  }
  lap.to(times.dispatch);
  experts_->forward(s.experts, s.rows, s.plan.rows_per_local_expert, s.expert_out);
  lap.to(times.experts);
  dispatcher_->combine(s.plan, s.expert_out, s.slot_rows);
  Tensor slot_full32 = Tensor::empty({s.plan.tokens * k, D}, DType::F32, device_);
  ops::cast(s.slot_rows, slot_full32);
  if (fold_) {
    s.slot32 = slot_full32;
  } else if (sp_) {
    ensure(s.slot32, {Tl * k, D}, DType::F32, device_);
    tp_->reduce_scatter(slot_full32, s.slot32, parallel::ReduceOp::Sum);
  } else {
    if (tp_->size() > 1) tp_->all_reduce(slot_full32, parallel::ReduceOp::Sum);
    s.slot32 = slot_full32;
  }
  lap.to(times.combine);
}

Tensor& MoELayer::forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb) const {
  State& s = static_cast<State&>(state);
  const int64_t Sl = in.dim(0), B = in.dim(1), D = spec_.hidden, k = moe_->spec().router.topk;
  // 1. Routing of the local tokens, in fp32.
  route_tokens(s, in, mb);
  // 2. The routing of all T tokens (gathered over tp with sequence parallelism), capacity; 3.
  // experts on the ranks that hold them, their rows back, summed over tp in fp32 unless the
  // experts are whole (folded: this rank's tokens only, complete rows).
  run_experts(s, in, mb);
  // 4. Combine with the gates (+ the shared expert). A dropped slot has gate 0 and a zero row,
  // so it adds exactly nothing.
  Lap lap;
  s.gates = host_vector_on(s.routing.gates, DType::F32, device_);
  Tensor y32 = Tensor::empty({Sl * B, D}, DType::F32, device_);
  ops::moe_combine(s.slot32, nullptr, &s.gates, k, y32);
  ensure(s.out, {Sl, B, D}, act(), device_);
  ops::cast(y32, s.out);
  lap.to(moe_->times().combine);
  if (shared_) ops::add_inplace(s.out, shared_->forward(s.shared, in, s.x32, mb));
  return s.out;
}

void MoELayer::backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                        const MicroBatchInfo& mb) const {
  State& s = static_cast<State&>(state);
  const RouterOptions& ro = moe_->spec().router;
  const int64_t Tl = s.routing.tokens, T = s.total_tokens, D = spec_.hidden, k = ro.topk;
  const int64_t E = ro.num_experts;
  MoeTimes& times = moe_->times();
  Lap lap;
  Tensor dy_scratch;
  const Tensor dy32 = f32_copy(d_out, dy_scratch, {Tl, D});
  // A dropped slot gets gate gradient 0 (its row is zero) and a row gradient nobody reads.
  ensure(s.d_slot32, {Tl * k, D}, DType::F32, device_);
  ensure(s.d_gates, {Tl * k}, DType::F32, device_);
  ops::moe_combine_backward(s.slot32, s.gates, dy32, k, s.d_slot32, s.d_gates);
  // The experts' backward on all T tokens' rows (folded: this rank's).
  Tensor d_slot_full32 = s.d_slot32;
  if (sp_ && !fold_) {
    d_slot_full32 = Tensor::empty({T * k, D}, DType::F32, device_);
    tp_->all_gather(s.d_slot32, d_slot_full32);
  }
  ensure(s.d_slot, {s.plan.tokens * k, D}, act(), device_);
  ops::cast(d_slot_full32, s.d_slot);
  dispatcher_->combine_backward(s.plan, s.d_slot, s.d_expert_out);
  lap.to(times.combine);
  experts_->backward(s.experts, s.d_expert_out, s.d_rows, &mb);
  lap.to(times.experts);
  dispatcher_->dispatch_backward(s.plan, s.d_rows, s.dx_full32);
  if (fold_) {
    s.dx32 = s.dx_full32;
  } else if (sp_) {
    ensure(s.dx32, {Tl, D}, DType::F32, device_);
    tp_->reduce_scatter(s.dx_full32, s.dx32, parallel::ReduceOp::Sum);
  } else {
    if (tp_->size() > 1) tp_->all_reduce(s.dx_full32, parallel::ReduceOp::Sum);
    s.dx32 = s.dx_full32;
  }
  lap.to(times.dispatch);
  // The router: gates, balancing and z losses -> logits -> input and weight.
  const float w = moe_->loss_weight();
  const Tensor d_gates = s.d_gates.to(Device::CPU);
  const Tensor dlogits = Tensor::empty({Tl, E}, DType::F32);  // on the host, as the routing
  router_backward(s.routing, ro, d_gates.data<float>(), s.balance, w, w, s.loss_tokens, s.batch,
                  dlogits.data<float>());
  s.dlogits = dlogits.to(device_);
  Tensor dx_router = Tensor::empty({Tl, D}, DType::F32, device_);
  ops::linear_backward(s.x32, s.router_w32, s.dlogits, &dx_router, nullptr, nullptr);
  const WeightGradInputs kept = state_input(&mb);
  run_weight_grads(&mb, {s.x32, s.router_w32, s.dlogits},
                   [this](const std::vector<Tensor>& in) {
                     ops::linear_backward(in[0], in[1], in[2], nullptr, &router_->grad,
                                          router_bias_ ? &router_bias_->grad : nullptr);
                   },
                   {kept, kept, kept});
  ops::add_inplace(s.dx32, dx_router);
  lap.to(times.router);
  // The shared expert's gate adds to the fp32 input gradient, its MLP to the cast one.
  const Tensor* d_shared =
      shared_ ? &shared_->backward(s.shared, d_out, s.x32, s.dx32, mb) : nullptr;
  ops::cast(s.dx32, d_in);
  if (d_shared) ops::add_inplace(d_in, *d_shared);
  // Statistics: once per trained micro-batch (a recomputed forward has no second backward).
  MoeLayerStats& st = moe_->stats(layer_);
  st.aux_loss += s.balance.loss;
  st.z_loss += s.z;
  for (int64_t e = 0; e < E; ++e)
    st.tokens_per_expert[static_cast<size_t>(e)] += s.picked_per_expert[static_cast<size_t>(e)];
  st.dropped += s.dropped;
  st.routed += static_cast<double>(Tl * k);
  st.min_routing_margin = std::min(st.min_routing_margin, double(s.routing.min_margin));
}

BlockSubmodules moe_submodules(const MoeGroups& groups, std::shared_ptr<MoeState> state) {
  MT_CHECK(groups.ep != nullptr && groups.expert_tp != nullptr,
           "moe_submodules: the ep and expert tp groups must be given");
  BlockSubmodules m;
  m.attention = [](const SubmoduleArgs& a) { return make_attention(a); };
  m.mlp = [groups, state](const SubmoduleArgs& a) -> std::unique_ptr<MlpLayer> {
    if (state->spec().is_moe_layer(a.layer)) return std::make_unique<MoELayer>(a, groups, state);
    return std::make_unique<DenseMLP>(a);
  };
  return m;
}

}  // namespace megatron::moe
