#pragma once
// Parameters know their global identity (DESIGN.md principle 5): global name, global shape and
// how this rank's shard is cut from it. Model weights, fp32 "main" gradients and (mixed
// precision) fp32 master weights each live in one contiguous buffer (principle 6) laid out in
// reverse registration order, i.e. in the order backward produces gradients, so data-parallel
// buckets are contiguous ranges.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "megatron/core/tensor.h"

namespace megatron {

// Which mesh axis splits a parameter (more axes arrive with expert parallelism).
enum class ShardAxis : uint8_t { None, Tensor };

struct ShardSpec {
  int dim = -1;  // split dimension of the global shape; -1 = replicated
  ShardAxis axis = ShardAxis::None;
  int64_t index = 0;  // this rank's shard
  int64_t count = 1;  // number of shards
  bool replicated() const { return dim < 0 || count == 1; }
};

struct ParamInit {
  enum class Kind : uint8_t { Normal, Zeros, Ones };
  Kind kind = Kind::Normal;
  float std = 0.02f;
};

struct Parameter {
  std::string name;  // global name, e.g. "layers.3.mlp.fc1.weight"
  Shape global_shape;
  Shape local_shape;
  ShardSpec shard;
  ParamInit init;
  bool weight_decay = true;  // false for norms and biases
  // Replicated over tensor parallel but fed by sequence-parallel slices: each rank holds a
  // partial gradient that must be summed over the tensor-parallel group before the step.
  bool tp_partial_grad = false;
  // A pipeline copy of a weight another stage also holds (the tied LM head on the last stage):
  // updated identically, but counted once in the gradient norm (on the first stage).
  bool shared_copy = false;
  // A routed expert's weight (megatron/transformer/moe): this rank holds only its expert-parallel
  // share of the experts, so its gradient is reduced over the expert-data-parallel group (not
  // dp) and it counts in the gradient norm on every expert-parallel rank. ParamStore lays these
  // out after all other parameters (ParamStore::expert_begin()).
  bool expert = false;
  // A frozen weight (LoRA's base model): no gradient, no fp32 master and no optimizer state; set
  // before ParamStore::finalize, which lays frozen weights out after every trainable one. Its
  // grad and master are empty tensors.
  bool frozen = false;
  int64_t offset = 0;  // element offset of this shard in the buffers
  // The weights the layers compute with, in the model dtype (fp32, or bf16/fp16 under mixed
  // precision): a view into ParamStore's weight buffer.
  Tensor weight;
  Tensor grad;    // fp32 main gradient: view into ParamStore's grad buffer
  Tensor master;  // fp32 master weights the optimizer updates (the same view as weight in fp32)

  // &grad, or null for a frozen weight (what the backward GEMMs take).
  Tensor* grad_or_null() { return frozen ? nullptr : &grad; }
  // Global flat index of local element i (for shard-independent init and checkpoints).
  int64_t global_index(int64_t local_index) const;
};

class ParamStore {
 public:
  // Every buffer, and every activation of the layers built on this store, lives on `device`.
  explicit ParamStore(Device device = Device::CPU) : device_(device) {}
  // Registers a parameter; its tensors exist after finalize(). The reference stays valid.
  Parameter& add(std::string name, const Shape& global_shape, ParamInit init, bool weight_decay,
                 ShardSpec shard = {});
  // Allocates the buffers and binds every parameter's views. The buffers are padded with zeros
  // to a multiple of pad_multiple (data-parallel sharding needs equal shards); expert weights
  // (Parameter::expert) come after everything else, from expert_begin(), that region padded to
  // a multiple of expert_pad_multiple (sharded over the expert-data-parallel group). With a 16-bit
  // model dtype (mixed precision) the model weights are stored in that dtype and the fp32
  // master weights separately (Megatron's layout: 2 + 4 + 4 bytes per parameter plus the
  // optimizer's moments); in fp32 one buffer is both. Frozen weights (Parameter::frozen) come
  // last, in the weight buffer only. Every buffer lives on device().
  void finalize(int64_t pad_multiple = 1, DType model_dtype = DType::F32,
                int64_t expert_pad_multiple = 1);
  // Where the experts' region starts (== trainable_numel() without experts).
  int64_t expert_begin() const { return expert_begin_; }
  // The trainable part of the weight buffer, [0, trainable_numel()): the gradient buffer, the
  // fp32 masters and the optimizer cover only it; frozen weights follow it.
  int64_t trainable_numel() const { return trainable_end_; }
  Device device() const { return device_; }
  bool finalized() const { return finalized_; }

  // Deterministic init from (seed, global name, global element index): any sharding of the same
  // model gets the same global weights.
  void initialize(uint64_t seed);
  void zero_grads();
  // Mixed precision: model weights <- master weights in [begin, end) of the buffer, rounded to
  // the model dtype (ops::cast, round to nearest even). No-op for fp32.
  void refresh_model_weights(int64_t begin, int64_t end);
  bool mixed_precision() const { return model_dtype_ != DType::F32; }
  DType model_dtype() const { return model_dtype_; }
  Tensor& weights() { return weights_; }                                 // model dtype
  Tensor& masters() { return mixed_precision() ? masters_ : weights_; }  // fp32

  std::vector<Parameter*> params();
  std::vector<const Parameter*> params() const;
  Parameter& get(const std::string& name);
  int64_t numel() const { return total_; }  // parameters (without padding)
  int64_t buffer_numel() const { return weights_.numel(); }
  Tensor& grads() { return grads_; }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::unordered_map<std::string, size_t> by_name_;  // name -> index in params_
  Tensor weights_, grads_, masters_;
  DType model_dtype_ = DType::F32;
  Device device_ = Device::CPU;
  int64_t total_ = 0;
  int64_t expert_begin_ = 0;
  int64_t trainable_end_ = 0;
  bool finalized_ = false;
};

// A stable 64-bit id of a name (FNV-1a), used as the Philox stream of its initialisation.
uint64_t name_hash(const std::string& name);

}  // namespace megatron
