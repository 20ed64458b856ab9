#pragma once
// A decoder language model loaded from a native checkpoint for evaluation and generation: the
// recipe saved with the checkpoint builds the model for a tensor-parallel group (pipeline 1,
// expert parallel 1, fp32 weights, no dropout), and each weight is read whole from the
// checkpoint (any layout) and cut to this rank's shard (vocabulary padding may differ). The
// model runs on the CPU or on the current CUDA device (weights, activations and KV caches
// there; logits come back to the host).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"
#include "megatron/params/parameter.h"
#include "megatron/transformer/kv_cache.h"
#include "models/registry.h"

namespace megatron::inference {

// Any model of a native checkpoint (decoder or BERT), built from its recorded recipe for a
// tensor-parallel group (pipeline 1, expert parallel 1, fp32, no dropout) with its weights
// loaded: each read whole from the checkpoint (any layout) and cut to this rank's shard
// (vocabulary padding may differ). seq_length: the longest sequence (0: the recipe's).
// device: where the weights and activations live (CUDA: the current device; InputError when
// none is usable); with tp > 1 on CUDA, `tp` must take device tensors (NCCL; CausalLM makes one).
struct LoadedModel {
  LoadedModel(const std::string& checkpoint_dir, std::optional<int64_t> iteration,
              parallel::Communicator& tp, int64_t seq_length = 0, Device device = Device::CPU);
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  config::Recipe recipe;
  std::string checkpoint_path;
  ParamStore store;
  models::ModelChunks chunks;
  const models::Model& model() const { return *chunks.chunks.at(0); }
};

// Vocabulary-parallel logits [N, V/tp] (fp32, on tp's device) of every tp rank -> the real
// vocabulary [N, vocab] on every rank, on the host (padding columns dropped).
Tensor gather_vocab_logits(const Tensor& local, parallel::Communicator& tp, int64_t vocab);

class CausalLM {
 public:
  // seq_length: the longest sequence forward() takes (0: the recipe's model.seq_length).
  // device CUDA: the model runs on the current CUDA device; with tp > 1 its tensor-parallel
  // collectives go through an NCCL communicator made here over tp's ranks (tp: MPI).
  CausalLM(const std::string& checkpoint_dir, std::optional<int64_t> iteration,
           parallel::Communicator& tp, int64_t seq_length = 0, Device device = Device::CPU);
  ~CausalLM();
  Device device() const { return loaded_.store.device(); }

  const config::Recipe& recipe() const { return loaded_.recipe; }
  int64_t vocab_size() const { return loaded_.chunks.vocab_size; }
  const std::string& checkpoint_path() const { return loaded_.checkpoint_path; }

  struct Output {
    Tensor logits;          // F32 [S, B, vocab_size] (real vocabulary, on every tp rank)
    double loss_sum = 0.0;  // summed cross-entropy over labels != kIgnoreIndex
    int64_t targets = 0;
  };
  // tokens, labels: int32 [S, B] on the host (labels may be empty: no loss); logits are on the
  // host whatever the model's device. With a cache (make_cache), the
  // tokens continue the cached sequences at position cache->length, only they are computed, and
  // cache->length advances by S.
  Output forward(const Tensor& tokens, const Tensor& labels = Tensor(),
                 KvCache* cache = nullptr) const;
  // A cache for sequences of up to max_length() positions (its tensors live on the model's
  // device, allocated by the layers on first use).
  KvCache make_cache() const;
  // The longest sequence (prompt and generated tokens) this model was built for.
  int64_t max_length() const { return loaded_.recipe.model.seq_length; }

 private:
  std::unique_ptr<parallel::Communicator> device_tp_;  // NCCL over tp's ranks (CUDA, tp > 1)
  parallel::Communicator* tp_;                         // the group the model computes with
  LoadedModel loaded_;
};

}  // namespace megatron::inference
