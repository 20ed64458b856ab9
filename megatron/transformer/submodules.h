#pragma once
// The sub-layers a transformer block holds, behind small interfaces, and the factories that
// build them (Megatron's ModuleSpec): the block calls attention and MLP only through these, so
// a mixture-of-experts MLP or LoRA-wrapped projections replace the dense ones by a different
// factory, with the block unchanged.
//
// Contract of both interfaces (the same as every layer's): forward fills a per-micro-batch state
// made by make_state() with what backward needs and returns the branch output [Sl, B, D] (a
// sequence slice with sequence parallelism), which lives in that state and which the block may
// modify in place (its residual dropout); backward takes the gradient of that output, writes the
// gradient of the branch input into d_in and accumulates parameter gradients (+=).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/context.h"
#include "megatron/transformer/transformer_spec.h"

namespace megatron {

// Per-micro-batch state of a layer behind an interface; each implementation derives its own.
struct LayerState {
  virtual ~LayerState() = default;
};

class AttentionLayer {
 public:
  virtual ~AttentionLayer() = default;
  virtual std::unique_ptr<LayerState> make_state() const = 0;
  // Whether `state` was made by this kind of layer (make_state()'s type).
  virtual bool owns(const LayerState& state) const {
    return typeid(state) == typeid(*make_state());
  }
  // key_mask: optional [B, S] (1 = attend).
  virtual Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb,
                          const uint8_t* key_mask) const = 0;
  virtual void backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                        const MicroBatchInfo& mb, const uint8_t* key_mask) const = 0;
  virtual void collect_params(std::vector<Parameter*>& out) const = 0;
};

class MlpLayer {
 public:
  virtual ~MlpLayer() = default;
  virtual std::unique_ptr<LayerState> make_state() const = 0;
  // Whether `state` was made by this kind of layer (make_state()'s type).
  virtual bool owns(const LayerState& state) const {
    return typeid(state) == typeid(*make_state());
  }
  virtual Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb) const = 0;
  virtual void backward(LayerState& state, const Tensor& d_out, Tensor& d_in,
                        const MicroBatchInfo& mb) const = 0;
  virtual void collect_params(std::vector<Parameter*>& out) const = 0;
};

// What a factory gets: the block's parameter prefix ("layers.3"), its index (dropout streams),
// the spec, the tensor-parallel group, and (selective recompute) the probabilities buffer all
// blocks share (null otherwise).
struct SubmoduleArgs {
  ParamStore& store;
  const std::string& prefix;
  int64_t layer;
  const TransformerSpec& spec;
  parallel::Communicator& tp;
  std::shared_ptr<Tensor> shared_probs;
};

struct BlockSubmodules {
  std::function<std::unique_ptr<AttentionLayer>(const SubmoduleArgs&)> attention;
  std::function<std::unique_ptr<MlpLayer>(const SubmoduleArgs&)> mlp;
};

// The attention layer the spec asks for: multi-latent attention (mla.h) when spec.mla is set,
// else self-attention (attention.h); with `cp` (context_parallel.h) as its core when given.
class ContextParallelAttention;
std::unique_ptr<AttentionLayer> make_attention(
    const SubmoduleArgs& args, std::shared_ptr<const ContextParallelAttention> cp = nullptr);

// make_attention's layer and the dense MLP (mlp.h).
BlockSubmodules dense_submodules();

}  // namespace megatron
