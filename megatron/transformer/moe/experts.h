#pragma once
// This rank's routed experts: MLPs (GeLU or SwiGLU, no biases, as Megatron's grouped-GEMM
// experts) over contiguous per-expert rows, one GEMM pair per expert. With tensor parallelism
// every expert is split like the dense MLP (fc1 by columns, fc2 by rows: expert tensor
// parallelism = tp), and the outputs are the tensor-parallel partial sums, reduced by the MoE
// layer after the experts' rows came back. Parameters
// "<prefix>.mlp.experts.<global expert>.fc1.weight" / ".fc2.weight" (Parameter::expert).
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/numeric.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/context.h"

namespace megatron::moe {

class GroupedExperts {
 public:
  struct State {
    Tensor rows, fc1_out, act_out;  // [R, D], [R, (2)F/tp], [R, F/tp]
    std::vector<int64_t> rows_per_expert;
    Tensor d_act, d_fc1;
  };

  GroupedExperts(ParamStore& store, const std::string& prefix, int64_t first_expert,
                 int64_t num_local, int64_t hidden, int64_t ffn, bool swiglu,
                 parallel::Communicator& tp, float init_std, float output_init_std,
                 math::Gelu gelu = math::Gelu::Tanh, math::Glu glu = {}, bool bias = false);

  // rows [R, D] expert-major (rows_per_expert[j] rows of local expert j, in order) -> out [R, D].
  void forward(State& s, const Tensor& rows, const std::vector<int64_t>& rows_per_expert,
               Tensor& out) const;
  // d_rows [R, D] written; weight gradients accumulated (queued for the zero-bubble schedule's
  // W when mb carries a weight-gradient queue: transformer/weight_grads.h).
  void backward(State& s, const Tensor& d_out, Tensor& d_rows,
                const MicroBatchInfo* mb = nullptr) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  void weight_grads(const std::vector<int64_t>& rows_per_expert, const Tensor& act_out,
                    const Tensor& d_out, const Tensor& rows, const Tensor& d_fc1) const;
  // bias: fc1's [(2,) F] split over tp like its rows, fc2's [D] whole on every tp rank but added
  // on rank 0 only (the ranks' outputs are summed); its gradient is whole on each.
  struct Expert {
    Parameter* fc1;
    Parameter* fc2;
    Parameter* fc1_bias = nullptr;
    Parameter* fc2_bias = nullptr;
  };
  bool adds_fc2_bias_ = false;
  std::vector<Expert> experts_;
  int64_t hidden_, local_ffn_;
  bool swiglu_;
  math::Gelu gelu_;
  math::Glu glu_;  // the gated unit's gate, clamps and offset (swiglu_)
  Device device_;
};

}  // namespace megatron::moe
