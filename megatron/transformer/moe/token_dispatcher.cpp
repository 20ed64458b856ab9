#include "megatron/transformer/moe/token_dispatcher.h"

#include <cstring>
#include <numeric>

#include "megatron/backend/ops.h"
#include "megatron/transformer/context.h"

namespace megatron::moe {

int64_t DispatchPlan::received_rows() const {
  return std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
}

TokenDispatcher::TokenDispatcher(parallel::Communicator& ep, int64_t num_experts)
    : ep_(&ep), num_experts_(num_experts) {
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
  p.send_counts.assign(static_cast<size_t>(P), 0);
  for (int64_t e = 0; e < E; ++e) {
    auto& rows = by_expert[static_cast<size_t>(e)];
    MT_CHECK(pad_to <= 0 || static_cast<int64_t>(rows.size()) <= pad_to,
             "token dispatcher: ", rows.size(), " rows for expert ", e, " above the capacity ",
             pad_to);
    if (pad_to > 0) rows.resize(static_cast<size_t>(pad_to), -1);
    counts[static_cast<size_t>(e)] = static_cast<int64_t>(rows.size());
    p.send_counts[static_cast<size_t>(e / El)] += counts[static_cast<size_t>(e)];
    p.send_slots.insert(p.send_slots.end(), rows.begin(), rows.end());
  }
  // Each rank learns how many rows every source sends to each of its local experts.
  std::vector<int64_t> recv_expert(static_cast<size_t>(P * El));
  std::vector<int64_t> el_counts(static_cast<size_t>(P), El);
  Tensor send = Tensor::wrap(counts.data(), {E}, DType::I64);
  Tensor recv = Tensor::wrap(recv_expert.data(), {P * El}, DType::I64);
  ep_->all_to_all(send, el_counts, recv, el_counts);
  p.recv_counts.assign(static_cast<size_t>(P), 0);
  p.rows_per_local_expert.assign(static_cast<size_t>(El), 0);
  for (int64_t s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j) {
      p.recv_counts[static_cast<size_t>(s)] += recv_expert[static_cast<size_t>(s * El + j)];
      p.rows_per_local_expert[static_cast<size_t>(j)] +=
          recv_expert[static_cast<size_t>(s * El + j)];
    }
  // Received (source-major) row -> expert-major row.
  std::vector<int64_t> expert_start(static_cast<size_t>(El), 0);
  for (int64_t j = 1; j < El; ++j)
    expert_start[static_cast<size_t>(j)] = expert_start[static_cast<size_t>(j - 1)] +
                                           p.rows_per_local_expert[static_cast<size_t>(j - 1)];
  p.expert_major.reserve(static_cast<size_t>(p.received_rows()));
  for (int64_t s = 0; s < P; ++s)
    for (int64_t j = 0; j < El; ++j)
      for (int64_t r = 0; r < recv_expert[static_cast<size_t>(s * El + j)]; ++r)
        p.expert_major.push_back(expert_start[static_cast<size_t>(j)]++);
  return p;
}

namespace {

char* row_ptr(const Tensor& t, int64_t row, size_t row_bytes) {
  return static_cast<char*>(t.raw()) + static_cast<size_t>(row) * row_bytes;
}

std::vector<int64_t> elements(const std::vector<int64_t>& rows, int64_t D) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * D;
  return out;
}

}  // namespace

template <typename RowOf>
void TokenDispatcher::forward_move(const DispatchPlan& p, const Tensor& src, RowOf row_of,
                                   Tensor& out) const {
  const int64_t D = p.hidden, n_send = static_cast<int64_t>(p.send_slots.size());
  const size_t rb = static_cast<size_t>(D) * dtype_size(src.dtype());
  Tensor sent = Tensor::empty({n_send, D}, src.dtype(), src.device());
  for (int64_t i = 0; i < n_send; ++i) {
    const int64_t slot = p.send_slots[static_cast<size_t>(i)];
    if (slot < 0)
      std::memset(row_ptr(sent, i, rb), 0, rb);
    else
      std::memcpy(row_ptr(sent, i, rb), row_ptr(src, row_of(slot), rb), rb);
  }
  const int64_t R = p.received_rows();
  Tensor received = Tensor::empty({R, D}, src.dtype(), src.device());
  ep_->all_to_all(sent, elements(p.send_counts, D), received, elements(p.recv_counts, D));
  ensure(out, {R, D}, src.dtype(), src.device());
  for (int64_t i = 0; i < R; ++i)
    std::memcpy(row_ptr(out, p.expert_major[static_cast<size_t>(i)], rb), row_ptr(received, i, rb),
                rb);
}

void TokenDispatcher::backward_move(const DispatchPlan& p, const Tensor& in, Tensor& sent) const {
  const int64_t D = p.hidden, R = p.received_rows();
  MT_CHECK(in.numel() == R * D, "token dispatcher: expert rows ", in.shape().str(), " != [", R,
           ", ", D, "]");
  const size_t rb = static_cast<size_t>(D) * dtype_size(in.dtype());
  Tensor received = Tensor::empty({R, D}, in.dtype(), in.device());
  for (int64_t i = 0; i < R; ++i)
    std::memcpy(row_ptr(received, i, rb), row_ptr(in, p.expert_major[static_cast<size_t>(i)], rb),
                rb);
  sent = Tensor::empty({static_cast<int64_t>(p.send_slots.size()), D}, in.dtype(), in.device());
  ep_->all_to_all(received, elements(p.recv_counts, D), sent, elements(p.send_counts, D));
}

void TokenDispatcher::dispatch(const DispatchPlan& p, const Tensor& x, Tensor& rows) const {
  MT_CHECK(x.numel() == p.tokens * p.hidden, "dispatch: x ", x.shape().str());
  const int64_t k = p.topk;
  forward_move(
      p, x, [k](int64_t slot) { return slot / k; }, rows);
}

void TokenDispatcher::combine_backward(const DispatchPlan& p, const Tensor& d_slot_rows,
                                       Tensor& d_expert_out) const {
  MT_CHECK(d_slot_rows.numel() == p.tokens * p.topk * p.hidden,
           "combine_backward: ", d_slot_rows.shape().str());
  forward_move(
      p, d_slot_rows, [](int64_t slot) { return slot; }, d_expert_out);
}

void TokenDispatcher::combine(const DispatchPlan& p, const Tensor& expert_out,
                              Tensor& slot_rows) const {
  Tensor sent;
  backward_move(p, expert_out, sent);
  const int64_t D = p.hidden;
  const size_t rb = static_cast<size_t>(D) * dtype_size(expert_out.dtype());
  ensure(slot_rows, {p.tokens * p.topk, D}, expert_out.dtype(), expert_out.device());
  ops::fill(slot_rows, 0.0f);
  for (size_t i = 0; i < p.send_slots.size(); ++i)
    if (p.send_slots[i] >= 0)
      std::memcpy(row_ptr(slot_rows, p.send_slots[i], rb),
                  row_ptr(sent, static_cast<int64_t>(i), rb), rb);
}

void TokenDispatcher::dispatch_backward(const DispatchPlan& p, const Tensor& d_expert_rows,
                                        Tensor& dx) const {
  Tensor sent;
  backward_move(p, d_expert_rows, sent);
  const int64_t D = p.hidden, k = p.topk;
  Tensor sent32 = sent;
  if (sent.dtype() != DType::F32) {
    sent32 = Tensor::empty(sent.shape(), DType::F32, sent.device());
    ops::cast(sent, sent32);
  }
  ensure(dx, {p.tokens, D}, DType::F32, d_expert_rows.device());
  ops::fill(dx, 0.0f);
  float* out = dx.data<float>();
  const float* in = sent32.data<float>();
  // In send order (expert, then token): each token's slots add up in expert order.
  for (size_t i = 0; i < p.send_slots.size(); ++i) {
    const int64_t slot = p.send_slots[i];
    if (slot < 0) continue;
    float* row = out + (slot / k) * D;
    const float* g = in + static_cast<int64_t>(i) * D;
    for (int64_t d = 0; d < D; ++d) row[d] += g[d];
  }
}

}  // namespace megatron::moe
