#pragma once
// LoRA (Hu et al.): a trainable low-rank update of a frozen Linear, y = W x + (alpha / r) B A x,
// with A [r, in] and B [out, r] (B starts at zero, so training starts from the base model).
// Names: "<linear>.lora_a.weight" and "<linear>.lora_b.weight". Sharded like the base layer
// under tensor parallelism:
//   column-parallel base (W split on its output): A replicated, B split like W's rows (gated
//     [2, F, D] weights too: B is [2, F, r]); A's gradient is a tensor-parallel partial sum
//     (Parameter::tp_partial_grad) and its input-gradient term joins the base's partial dx
//     before the base's reduction;
//   row-parallel base (W split on its input): A split on its input like W, B replicated; the
//     rank-r activation A x is summed over tensor parallelism (one small all-reduce) so B's
//     gradient is complete on every rank.
// Linear owns the adapter and calls it at those points (megatron/transformer/layers.cpp).
#include <cstdint>
#include <string>

#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/weight_grads.h"

namespace megatron {

enum class TPMode : uint8_t;

struct LoraSpec {
  int64_t rank = 0;  // 0: no adapter
  float alpha = 16.0f;
  // Dropout on the adapter's input (training only), drawn like every dropout here from
  // DropoutSite{seed, iteration, layer, site} at the element's global index (the features of a
  // row-parallel shard at their global feature index), so masks do not depend on the layout.
  float dropout = 0.0f;
  uint64_t seed = 0;
  int64_t layer = 0, site = 0;
  float scale() const { return alpha / static_cast<float>(rank); }
};

class LoRAAdapter {
 public:
  // For a Linear named `name` with global [out, in] (weight_shape: its weight's global shape).
  LoRAAdapter(ParamStore& store, const std::string& name, int64_t in, int64_t out,
              const Shape& weight_shape, TPMode mode, parallel::Communicator& tp,
              const LoraSpec& spec);

  // Column base. x: the full input the base multiplied; y += scale * B A x (y: this rank's
  // output columns). h receives scale * A x [N, r] for backward.
  // mb (null: no dropout) selects the dropout mask; xbuf holds the dropped input.
  void forward_column(Tensor& h, const Tensor& x, Tensor& y, const MicroBatchInfo* mb,
                      Tensor& xbuf) const;
  // Row base. x: this rank's input shard; h receives scale * (A x summed over tp) [N, r] and
  // out = h B^T [N, out] (the full update, to add to the reduced output or its rows).
  void forward_row(Tensor& h, const Tensor& x, Tensor& out, const MicroBatchInfo* mb,
                   Tensor& xbuf) const;
  // Backward of either (x and h as the forward saw them; dy: this rank's output columns, or
  // for a row base the gradient of every row of h): dB += dy^T h, dA += dh^T x with
  // dh = scale * dy B (a tp-partial sum for a column base), and dx (if any) += dh A through
  // the dropout mask (a column base's dx is the partial sum its Linear reduces). dB and dA go
  // through run_weight_grads (weight_grads.h: now, or queued for the schedule's W); x_kind and
  // dy_kind say whether x and dy stay valid until then.
  void backward(const Tensor& h, const Tensor& x, const Tensor& dy, Tensor* dx, Tensor& scratch,
                const MicroBatchInfo* mb, Tensor& xbuf,
                WeightGradInputs x_kind = WeightGradInputs::Copy,
                WeightGradInputs dy_kind = WeightGradInputs::Copy) const;

  Parameter& a() const { return *a_; }
  Parameter& b() const { return *b_; }

 private:
  // x through this call's dropout mask (into buf), or x itself without dropout.
  Tensor dropped(const Tensor& x, const MicroBatchInfo* mb, Tensor& buf) const;
  bool dropout_on(const MicroBatchInfo* mb) const {
    return mb != nullptr && mb->training && spec_.dropout > 0.0f;
  }
  Tensor a_2d() const;
  Tensor b_2d() const;
  Tensor grad_a_2d() const;
  Tensor grad_b_2d() const;
  Parameter* a_ = nullptr;
  Parameter* b_ = nullptr;
  parallel::Communicator* tp_;
  int64_t rank_, local_in_, local_out_;
  float scale_;
  LoraSpec spec_;
  bool row_ = false;
};

// True for the names LoRA gives its adapter weights.
bool is_lora_parameter(const std::string& name);

}  // namespace megatron
