#pragma once
// Multi-head self-attention with grouped query groups, tensor-parallel over heads: a
// column-parallel fused QKV projection (rows grouped per query group, [G, H/G + 2, Dh] x D),
// optional rotary embeddings, the attention core (unfused, keeping the probabilities
// [B, H/tp, S, S]; or flash, keeping only lse [B, H/tp, S]) and a row-parallel output
// projection. Parameters "<prefix>.attention.qkv" and "<prefix>.attention.proj" (and the
// per-head q/k norms of qk_norm.h with qk_layernorm).
// Under selective recompute the probabilities live in a buffer shared by all blocks and are
// recomputed from the saved qkv before the backward.
#include <cmath>
#include <memory>

#include "kernels/common/attention_shape.h"
#include "kernels/common/numeric.h"
#include "megatron/transformer/attention_core.h"
#include "megatron/transformer/kv_cache.h"
#include "megatron/transformer/qk_norm.h"
#include "megatron/transformer/submodules.h"

namespace megatron {

// The rotary frequencies of a layer with spec s (its rope choices applied) for a sequence
// spanning seq_len positions, cached tokens included (LongRoPE picks its factors and dynamic NTK
// its base by it).
math::RopeFrequencies rope_frequencies_of(const TransformerSpec& s, int64_t seq_len);
// The positions a training forward's sequence of S rows spans: the whole sequence under context
// parallelism, else the rows (packed documents count as the sequence they are packed in).
inline int64_t rope_span(int64_t S, const MicroBatchInfo& mb) {
  return mb.cp.active() ? mb.cp.total : S;
}

class SelfAttention final : public AttentionLayer {
 public:
  struct State final : LayerState {
    Linear::Ctx qkv, proj;
    QkNorm::Ctx qk_norm;
    Tensor qkv_raw;  // qk_layernorm: the projection before the norms (qkv_out after them)
    Tensor qkv_out, attn_out, out;  // out: the projection [Sl, B, D]
    Tensor d_attn, d_qkv;           // backward scratch
    AttentionCore::State core;
  };

  // cp: the context-parallel core (context_parallel.h) in place of the local one, or null.
  explicit SelfAttention(const SubmoduleArgs& args,
                         std::shared_ptr<const ContextParallelAttention> cp = nullptr);

  std::unique_ptr<LayerState> make_state() const override { return std::make_unique<State>(); }
  bool owns(const LayerState& s) const override { return typeid(s) == typeid(State); }
  Tensor& forward(LayerState& state, const Tensor& in, const MicroBatchInfo& mb,
                  const uint8_t* key_mask) const override;
  void backward(LayerState& state, const Tensor& d_out, Tensor& d_in, const MicroBatchInfo& mb,
                const uint8_t* key_mask) const override;
  void collect_params(std::vector<Parameter*>& out) const override;

 private:
  Tensor& cached_forward(State& s, const Tensor& in, KvCache& cache) const;
  // The QKV projection of `in` into s.qkv_out [S, B, qkv_width], with the q/k norms (the
  // projection itself then kept in s.qkv_raw); before rotary embeddings.
  void project_qkv(State& s, const Tensor& in, int64_t S, const MicroBatchInfo* mb) const;
  math::RopeFrequencies rope_frequencies(int64_t seq_len) const {
    return rope_frequencies_of(spec_, seq_len);
  }
  kernels::AttentionShape shape(int64_t S, int64_t B, int64_t batch_offset) const {
    return core_.shape(S, B, batch_offset, local_heads_, local_groups_, spec_.head_dim(),
                       local_heads_ * tp_->rank(), spec_.heads);
  }
  // A sliding-window layer of a model with a local rope base (Gemma 3): that base, unscaled.
  static void use_local_rope(TransformerSpec& s);
  // The full sequence length of a branch input of local_seq rows.
  int64_t full_seq(int64_t local_seq) const { return sp_ ? local_seq * tp_->size() : local_seq; }
  DType act() const { return spec_.activation_dtype; }

  TransformerSpec spec_;
  Device device_;  // the store's: where the activations live
  int64_t layer_;
  parallel::Communicator* tp_;
  bool sp_;
  int64_t local_heads_, local_groups_;
  std::unique_ptr<Linear> qkv_, proj_;
  std::unique_ptr<QkNorm> qk_norm_;  // qk_layernorm only
  AttentionCore core_;
};

// The softmax scale: model.softmax_scale, else 1 / sqrt(head_dim).
inline float softmax_scale_of(const TransformerSpec& s, int64_t head_dim) {
  return s.softmax_scale > 0.0f ? s.softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace megatron
