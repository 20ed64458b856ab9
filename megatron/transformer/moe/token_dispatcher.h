#pragma once
// Moves token rows to the expert-parallel ranks that hold their experts and the experts' outputs
// back (Megatron's all-to-all token dispatcher), over the `ep` communicator.
//
// Global expert e lives on ep rank e / (E / ep) as its local expert e % (E / ep). A plan, made
// once per micro-batch on the host from the routing (picked experts and kept flags of T tokens x
// k slots), orders the (token, slot) pairs by expert (then token), exchanges the per-expert row
// counts, and keeps the row indices of the four moves as int32 tensors on the layer's device:
//   dispatch            x [T, D]            -> expert-major rows [R, D] (all-to-all)
//   combine             expert rows [R, D]  -> slot rows [T * k, D], zero where nothing was sent
//   combine_backward    d slot rows         -> d expert rows (the dispatch move)
//   dispatch_backward   d expert rows       -> d x [T, D], each token's slots summed in fp32 in
//                                              slot order (ops::moe_combine)
// Expert-major: local expert 0's rows from source rank 0, 1, ..., then local expert 1's, ...
// so each local expert's rows are contiguous (a grouped GEMM per expert). The rows move by device
// ops (ops::gather_rows / scatter_rows) and the ep all-to-all, so the same code runs on every
// device; with ep of one the exchange and the permutation are the identity and are skipped.
// Empty experts, ranks that send or receive nothing and micro-batches whose tokens all go to one
// expert need no special case: counts may be zero everywhere.
#include <cstdint>
#include <vector>

#include "megatron/core/tensor.h"
#include "megatron/parallel/communicator.h"

namespace megatron::moe {

struct DispatchPlan {
  int64_t tokens = 0, topk = 0, hidden = 0;
  std::vector<int64_t> send_counts;            // rows to each ep rank
  std::vector<int64_t> recv_counts;            // rows from each ep rank
  std::vector<int64_t> rows_per_local_expert;  // [E / ep], rows this rank's experts receive
  // int32 on the device (-1: none), views of one allocation:
  Tensor send_token;    // [sent rows] the token of each sent row (-1: a padding row)
  Tensor send_slot;     // [sent rows] its slot, token * k + j (-1: a padding row)
  Tensor expert_major;  // [received rows] received row -> its expert-major row
  Tensor slot_source;   // [T * k] slot -> the sent row that carried it (-1: dropped)
  int64_t sent_rows() const { return send_token.numel(); }
  int64_t received_rows() const { return expert_major.numel(); }
};

class TokenDispatcher {
 public:
  // device: where the layer's tensors (and the plans' indices) live.
  TokenDispatcher(parallel::Communicator& ep, int64_t num_experts, Device device);

  int64_t local_experts() const { return local_experts_; }
  int64_t first_local_expert() const { return ep_->rank() * local_experts_; }

  // experts/kept [T, k] host arrays; pad_to > 0 pads every expert's rows to pad_to with zero rows
  // (moe_pad_expert_input_to_capacity).
  DispatchPlan plan(const int32_t* experts, const uint8_t* kept, int64_t tokens, int64_t topk,
                    int64_t hidden, int64_t pad_to) const;

  void dispatch(const DispatchPlan& p, const Tensor& x, Tensor& expert_rows) const;
  void combine(const DispatchPlan& p, const Tensor& expert_out, Tensor& slot_rows) const;
  void combine_backward(const DispatchPlan& p, const Tensor& d_slot_rows,
                        Tensor& d_expert_out) const;
  // dx [T, D] fp32 (written).
  void dispatch_backward(const DispatchPlan& p, const Tensor& d_expert_rows, Tensor& dx) const;

 private:
  // Rows of `src` picked by `index` (send order) -> all-to-all -> expert-major `out`.
  void forward_move(const DispatchPlan& p, const Tensor& src, const Tensor& index,
                    Tensor& out) const;
  // Expert-major `in` -> all-to-all back -> rows in send order.
  Tensor backward_move(const DispatchPlan& p, const Tensor& in) const;

  parallel::Communicator* ep_;
  int64_t num_experts_, local_experts_;
  Device device_;
};

}  // namespace megatron::moe
