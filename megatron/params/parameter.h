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

#include "megatron/core/device_memory.h"
#include "megatron/core/tensor.h"
#include "megatron/params/sharding.h"

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
  // The unit it is gathered and reduced with under sharded data parallelism (ParamStore::
  // begin_unit).
  int64_t unit = 0;
  int64_t offset = 0;  // element offset of this shard in the (virtual) buffer
  // The weights the layers compute with, in the model dtype (fp32, or bf16/fp16 under mixed
  // precision): a view into ParamStore's weight buffer, or (weights sharded) into its unit's
  // gathered copy while the unit is in use and empty otherwise.
  Tensor weight;
  // fp32 main gradient: a view into ParamStore's grad buffer, or (gradients sharded) into its
  // unit's transient gradient while the unit's backward runs and empty otherwise.
  Tensor grad;

  // &grad, or null for a frozen weight (what the backward GEMMs take).
  Tensor* grad_or_null() { return frozen ? nullptr : &grad; }
  // Global flat index of local element i (for shard-independent init and checkpoints).
  int64_t global_index(int64_t local_index) const;
};

class ParamStore {
 public:
  // Every buffer, and every activation of the layers built on this store, lives on `device`; its
  // ops backend (backend/device_backends.h) is picked here, so a device this build has no
  // backend for is an error when the model is built, not at its first op.
  explicit ParamStore(Device device = Device::CPU);
  // Starts a parameter unit: the parameters added from now on form unit begin_unit()'s id (before
  // any call, unit 0). Models start one per layer, per embedding table and for the head.
  int64_t begin_unit();
  int64_t num_units() const { return units_; }
  // Registers a parameter; its tensors exist after finalize(). The reference stays valid.
  Parameter& add(std::string name, const Shape& global_shape, ParamInit init, bool weight_decay,
                 ShardSpec shard = {});
  // Allocates the buffers and binds every parameter's views. Layout: dense trainable weights in
  // reverse registration order (the order backward finishes gradients), then routed experts'
  // (Parameter::expert; from expert_begin()), then frozen weights (Parameter::frozen; from
  // trainable_numel(), in the weight buffer only). The pieces and what is kept of each buffer
  // follow `sharding` (sharding.h). With a 16-bit model dtype (mixed precision) the model weights
  // are stored in that dtype and the fp32 master weights separately (Megatron's layout: 2 + 4 + 4
  // bytes per parameter plus the optimizer's moments); in fp32 one buffer is both. Every buffer
  // lives on device().
  void finalize(DType model_dtype = DType::F32, const DataParallelSharding& sharding = {});
  // Where the experts' region starts (== trainable_numel() without experts).
  int64_t expert_begin() const { return expert_begin_; }
  // The end of the trainable part of the buffer, [0, trainable_numel()): gradients, fp32
  // masters and the optimizer cover only it; frozen weights follow it.
  int64_t trainable_numel() const { return trainable_end_; }
  Device device() const { return device_; }
  bool finalized() const { return finalized_; }

  // Deterministic init from (seed, global name, global element index): any sharding of the same
  // model gets the same global weights.
  void initialize(uint64_t seed);
  void zero_grads();
  // Mixed precision: the segment's model weights <- its master weights, rounded to the model
  // dtype (ops::cast, round to nearest even). No-op for fp32 (one buffer).
  void refresh_model_weights(const ParamSegment& s);
  void refresh_model_weights();  // every owned segment
  bool mixed_precision() const { return model_dtype_ != DType::F32; }
  DType model_dtype() const { return model_dtype_; }
  // The buffers as this rank keeps them (whole, or its shard coordinates: sharding.h).
  Tensor& weights() { return weights_; }                                 // model dtype
  Tensor& masters() { return mixed_precision() ? masters_ : weights_; }  // fp32
  // Offload: the offloaded segments' fp32 masters (host memory; empty without offload).
  Tensor& host_masters() { return host_masters_; }
  const DataParallelSharding& sharding() const { return sharding_; }
  // The pieces of the buffer in buffer order (the frozen region's only with weights sharded).
  const std::vector<ShardPiece>& pieces() const { return pieces_; }
  // The owned slices of the trainable parameters, in buffer order: what the optimizer steps.
  const std::vector<ParamSegment>& segments() const { return segments_; }
  // With weights sharded: the owned slices of the frozen parameters (saved and loaded like the
  // trainable ones' weights).
  const std::vector<ParamSegment>& frozen_segments() const { return frozen_segments_; }
  // Elements of the owned slices of the trainable pieces (the sharded buffers' size).
  int64_t owned_trainable_numel() const { return owned_trainable_; }
  // The parameters of unit u (registration order).
  std::vector<Parameter*> unit_params(int64_t unit);

  std::vector<Parameter*> params();
  std::vector<const Parameter*> params() const;
  Parameter& get(const std::string& name);
  Parameter* find(const std::string& name);  // null when there is none
  int64_t numel() const { return total_; }   // parameters (without padding)
  // The virtual buffer's size (buffer coordinates; padding included).
  int64_t buffer_numel() const { return buffer_end_; }
  Tensor& grads() { return grads_; }

 private:
  std::vector<std::unique_ptr<Parameter>> params_;
  std::unordered_map<std::string, size_t> by_name_;  // name -> index in params_
  void lay_out();
  void bind_segments();
  void offload_masters();
  Tensor weights_, grads_, masters_, host_masters_;
  PinnedHostBuffer host_masters_memory_;
  DataParallelSharding sharding_;
  std::vector<ShardPiece> pieces_;
  std::vector<ParamSegment> segments_, frozen_segments_;
  int64_t owned_trainable_ = 0, owned_all_ = 0;
  int64_t units_ = 1, current_unit_ = 0;
  DType model_dtype_ = DType::F32;
  Device device_ = Device::CPU;
  int64_t total_ = 0;
  int64_t expert_begin_ = 0;
  int64_t trainable_end_ = 0;
  int64_t buffer_end_ = 0;
  bool finalized_ = false;
};

// A stable 64-bit id of a name (FNV-1a), used as the Philox stream of its initialisation.
uint64_t name_hash(const std::string& name);

}  // namespace megatron
