#pragma once
// The dense MLP: a column-parallel fc1 (for SwiGLU the gate and up halves, weight [2, F, D] so
// every shard holds its own part of both), GeLU or SwiGLU, a row-parallel fc2. Parameters
// "<prefix>.mlp.fc1" and "<prefix>.mlp.fc2".
#include <memory>

#include "megatron/transformer/submodules.h"

namespace megatron {

class DenseMLP final : public MlpLayer {
 public:
  struct State final : LayerState {
    Linear::Ctx fc1, fc2;
    Tensor fc1_out, act_out, out;  // out: fc2's output [Sl, B, D]
    Tensor d_act, d_fc1;           // backward scratch
  };

  explicit DenseMLP(const SubmoduleArgs& args);
  // The same MLP named "<name>.fc1"/"<name>.fc2" with width ffn (an MoE layer's shared expert).
  DenseMLP(const SubmoduleArgs& args, const std::string& name, int64_t ffn);

  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<State>(); }
  bool owns(const LayerState& s) const override { return typeid(s) == typeid(State); }
  Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb) const override;
  void backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                const MicroBatchInfo& mb) const override;
  void collect_params(std::vector<Parameter*>& out) const override;

 private:
  DType act() const { return spec_.activation_dtype; }

  TransformerSpec spec_;
  Device device_;  // the store's: where the activations live
  parallel::Communicator* tp_;
  bool sp_;
  std::unique_ptr<Linear> fc1_, fc2_;
};

}  // namespace megatron
