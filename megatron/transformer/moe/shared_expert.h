#pragma once
// An MoE layer's shared expert: a dense MLP every token passes through (DeepSeek-MoE's shared
// experts, "<prefix>.mlp.shared_experts.fc1/fc2"), optionally scaled per token by a sigmoid gate
// (Qwen2-MoE's shared_expert_gate, Megatron-Core's moe_shared_expert_gate):
//   out_t = sigmoid(x_t . w) * mlp(x)_t,  w = "<prefix>.mlp.shared_experts.gate_weight" [1, D].
// The gate is computed in fp32 from the layer's fp32 input; its sigmoid runs on the host (one
// value per token, as the router's choices), the row scaling by device ops. With sequence
// parallelism each rank gates its own tokens, so w's gradient is a tensor-parallel partial sum.
#include <memory>
#include <vector>

#include "megatron/transformer/mlp.h"

namespace megatron::moe {

class SharedExpert {
 public:
  struct State {
    std::unique_ptr<LayerState> mlp;
    Tensor mlp_out;                  // the MLP's output [Sl, B, D] (its state's tensor)
    Tensor w32, logits, gate, out;   // fp32 gate weight [1, D], logits [Tl, 1], gate [Tl]; out
    std::vector<float> gate_host;    // sigmoid values (what `gate` holds, on the host)
    std::vector<float> dlogit_host;  // backward scratch
    Tensor d_mlp_out, d_gate, dlogit, dx_gate, d_in;
  };

  // ffn: the MLP's width; gated: with the sigmoid gate; sp: sequence parallel (tp > 1).
  SharedExpert(const SubmoduleArgs& args, int64_t ffn, bool gated, bool sp);

  // The expert's contribution for the layer input x [Sl, B, D] (x32: its fp32 copy [Tl, D]).
  const Tensor& forward(State& s, const Tensor& x, const Tensor& x32,
                        const MicroBatchInfo& mb) const;
  // From d_out (the layer's output gradient): adds the gate's input gradient to dx32 (fp32
  // [Tl, D]) and returns the MLP's input gradient (activation dtype, like d_out).
  const Tensor& backward(State& s, const Tensor& d_out, const Tensor& x32, Tensor& dx32,
                         const MicroBatchInfo& mb) const;
  void collect_params(std::vector<Parameter*>& out) const;

 private:
  std::unique_ptr<DenseMLP> mlp_;
  Parameter* gate_ = nullptr;  // null: ungated
  DType act_;
  Device device_;
};

}  // namespace megatron::moe
