#include "megatron/transformer/moe/token_dispatcher.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/moe/host_collectives.h"

namespace megatron::moe {

TokenDispatcher::TokenDispatcher(parallel::Communicator& ep, int64_t num_experts, Device device)
    : ep_(&ep), num_experts_(num_experts), device_(device) {
  MT_CHECK(num_experts > 0 && num_experts % ep.size() == 0, "token dispatcher: ", num_experts,
           " experts do not split over expert parallel size ", ep.size());
  local_experts_ = num_experts / ep.size();
}

DispatchPlan TokenDispatcher::plan(const int32_t* experts, const uint8_t* kept, int64_t T,
                                   int64_t k, int64_t D, int64_t pad_to) const {
  const int64_t E = num_experts_, El = local_experts_, P = ep_->size();
  DispatchPlan p;
  p.tokens = T;
  p.topk = k;
  p.hidden = D;
  std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(E));
  for (int64_t i = 0; i < T * k; ++i) {
    if (!kept[i]) continue;
    const int32_t e = experts[i];
    MT_CHECK(e >= 0 && e < E, "token dispatcher: expert ", e, " outside [0, ", E, ")");
    by_expert[static_cast<size_t>(e)].push_back(i);
  }
  std::vector<int64_t> counts(static_cast<size_t>(E));  // rows per global expert
  std::vector<int64_t> send_slots;                      // send order -> slot (-1: padding)
  p.send_counts.assign(static_cast<size_t>(P), 0);
  for (int64_t e = 0; e < E; ++e) {
    auto& rows = by_expert[static_cast<size_t>(e)];
    MT_CHECK(pad_to <= 0 || static_cast<int64_t>(rows.size()) <= pad_to,
             "token dispatcher: ", rows.size(), " rows for expert ", e, " above the capacity ",
             pad_to);
    if (pad_to > 0) rows.resize(static_cast<size_t>(pad_to), -1);
    counts[static_cast<size_t>(e)] = static_cast<int64_t>(rows.size());
    p.send_counts[static_cast<size_t>(e / El)] += counts[static_cast<size_t>(e)];
    send_slots.insert(send_slots.end(), rows.begin(), rows.end());
  }
  // Each rank learns how many rows every source sends to each of its local experts.
  std::vector<int64_t> recv_expert(static_cast<size_t>(P * El));
  const std::vector<int64_t> el_counts(static_cast<size_t>(P), El);
  all_to_all_host(*ep_, Tensor::wrap(counts.data(), {E}, DType::I64), el_counts,
                  Tensor::wrap(recv_expert.data(), {P * El}, DType::I64), el_counts, device_);
  p.recv_counts.assign(static_cast<size_t>(P), 0);
  p.rows_per_local_expert.assign(static_cast<size_t>(El), 0);
  for (int64_t s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j) {
      p.recv_counts[static_cast<size_t>(s)] += recv_expert[static_cast<size_t>(s * El + j)];
      p.rows_per_local_expert[static_cast<size_t>(j)] +=
          recv_expert[static_cast<size_t>(s * El + j)];
    }
  const int64_t S = static_cast<int64_t>(send_slots.size());
  const int64_t R = std::accumulate(p.recv_counts.begin(), p.recv_counts.end(), int64_t{0});
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  MT_CHECK(T * k <= kMax && S <= kMax && R <= kMax, "token dispatcher: ", T * k, " slots, ", S,
           " sent and ", R, " received rows exceed the int32 row indices");
  // The four index arrays in one host tensor, moved to the device at once.
  Tensor idx = Tensor::empty({2 * S + R + T * k}, DType::I32);
  int32_t* send_token = idx.data<int32_t>();
  int32_t* send_slot = send_token + S;
  int32_t* expert_major = send_slot + S;
  int32_t* slot_source = expert_major + R;
  std::fill(slot_source, slot_source + T * k, -1);
  for (int64_t i = 0; i < S; ++i) {
    const int64_t slot = send_slots[static_cast<size_t>(i)];
    send_slot[i] = static_cast<int32_t>(slot);
    send_token[i] = slot < 0 ? -1 : static_cast<int32_t>(slot / k);
    if (slot >= 0) slot_source[slot] = static_cast<int32_t>(i);
  }
  // Received (source-major) row -> expert-major row.
  std::vector<int64_t> expert_start(static_cast<size_t>(El), 0);
  for (int64_t j = 1; j < El; ++j)
    expert_start[static_cast<size_t>(j)] = expert_start[static_cast<size_t>(j - 1)] +
                                           p.rows_per_local_expert[static_cast<size_t>(j - 1)];
  int64_t at = 0;
  for (int64_t s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j)
      for (int64_t r = 0; r < recv_expert[static_cast<size_t>(s * El + j)]; ++r)
        expert_major[at++] = static_cast<int32_t>(expert_start[static_cast<size_t>(j)]++);
  idx = idx.to(device_);
  p.send_token = idx.flat_view(0, {S});
  p.send_slot = idx.flat_view(S, {S});
  p.expert_major = idx.flat_view(2 * S, {R});
  p.slot_source = idx.flat_view(2 * S + R, {T * k});
  return p;
}

namespace {

std::vector<int64_t> elements(const std::vector<int64_t>& rows, int64_t D) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * D;
  return out;
}

}  // namespace

void TokenDispatcher::forward_move(const DispatchPlan& p, const Tensor& src, const Tensor& index,
                                   Tensor& out) const {
  const int64_t D = p.hidden, R = p.received_rows();
  ensure(out, {R, D}, src.dtype(), src.device());
  // A group of one receives what it sends, already expert-major: one gather is the whole move.
  if (ep_->size() == 1) return ops::gather_rows(src, index, out);
  Tensor sent = Tensor::empty({p.sent_rows(), D}, src.dtype(), src.device());
  ops::gather_rows(src, index, sent);
  Tensor received = Tensor::empty({R, D}, src.dtype(), src.device());
  ep_->all_to_all(sent, elements(p.send_counts, D), received, elements(p.recv_counts, D));
  ops::scatter_rows(received, p.expert_major, out);
}

Tensor TokenDispatcher::backward_move(const DispatchPlan& p, const Tensor& in) const {
  const int64_t D = p.hidden, R = p.received_rows();
  MT_CHECK(in.numel() == R * D, "token dispatcher: expert rows ", in.shape().str(), " != [", R,
           ", ", D, "]");
  if (ep_->size() == 1) return in.view({R, D});
  Tensor received = Tensor::empty({R, D}, in.dtype(), in.device());
  ops::gather_rows(in.view({R, D}), p.expert_major, received);
  Tensor sent = Tensor::empty({p.sent_rows(), D}, in.dtype(), in.device());
  ep_->all_to_all(received, elements(p.recv_counts, D), sent, elements(p.send_counts, D));
  return sent;
}

void TokenDispatcher::dispatch(const DispatchPlan& p, const Tensor& x, Tensor& rows) const {
  MT_CHECK(x.numel() == p.tokens * p.hidden, "dispatch: x ", x.shape().str());
  forward_move(p, x.view({p.tokens, p.hidden}), p.send_token, rows);
}

void TokenDispatcher::combine_backward(const DispatchPlan& p, const Tensor& d_slot_rows,
                                       Tensor& d_expert_out) const {
  MT_CHECK(d_slot_rows.numel() == p.tokens * p.topk * p.hidden,
           "combine_backward: ", d_slot_rows.shape().str());
  forward_move(p, d_slot_rows.view({p.tokens * p.topk, p.hidden}), p.send_slot, d_expert_out);
}

void TokenDispatcher::combine(const DispatchPlan& p, const Tensor& expert_out,
                              Tensor& slot_rows) const {
  const Tensor sent = backward_move(p, expert_out);
  ensure(slot_rows, {p.tokens * p.topk, p.hidden}, expert_out.dtype(), expert_out.device());
  ops::gather_rows(sent, p.slot_source, slot_rows);  // zero rows for the dropped slots
}

void TokenDispatcher::dispatch_backward(const DispatchPlan& p, const Tensor& d_expert_rows,
                                        Tensor& dx) const {
  const Tensor sent = backward_move(p, d_expert_rows);
  ensure(dx, {p.tokens, p.hidden}, DType::F32, d_expert_rows.device());
  // Each token's slots add up in slot order (0..k-1) on every device; this used to be the
  // order of the experts, which differs only for k > 2 (two terms from zero commute exactly).
  ops::moe_combine(sent, &p.slot_source, nullptr, p.topk, dx);
}

}  // namespace megatron::moe
