#pragma once
// The attention core behind every attention layer: from a fused qkv activation after rope
// ([S, B, G, H/G + 2, Dh], this rank's heads) to the attention output [S, B, H * Dh]. Unfused
// (keeping the probabilities [B, H, S, S], shared by the blocks under selective recompute and
// recomputed before backward), flash (keeping the row lse [B, H, S]) or, under context
// parallelism, the CP group's core (context_parallel.h); with attention sinks (model.softmax_type)
// wrapped around the flash kernels (attention_sinks.h). SelfAttention and MultiLatentAttention
// differ in how they make qkv, not in this.
#include <memory>

#include "kernels/common/attention_shape.h"
#include "megatron/transformer/attention_sinks.h"
#include "megatron/transformer/context_parallel.h"
#include "megatron/transformer/submodules.h"

namespace megatron {

class AttentionCore {
 public:
  struct State {
    Tensor probs, lse;
    Tensor sink_logits, d_sinked;  // attention sinks: fp32 logits, the scaled output gradient
    ContextParallelAttention::State cp;
  };

  // scale: the softmax scale; cp: the context-parallel core, or null.
  AttentionCore(const SubmoduleArgs& args, float scale,
                std::shared_ptr<const ContextParallelAttention> cp);

  float scale() const { return scale_; }
  void collect_params(std::vector<Parameter*>& out) const;
  // The attention sinks' F32 logits for the KV-cache decoder (`scratch` may take them), or null.
  const Tensor* sink_logits(Tensor& scratch) const {
    return sinks_ ? &sinks_->logits(scratch) : nullptr;
  }
  // This rank's heads (H local heads in G local groups of head dimension Dh) at S x B.
  kernels::AttentionShape shape(int64_t S, int64_t B, int64_t batch_offset, int64_t H, int64_t G,
                                int64_t Dh, int64_t head_offset, int64_t total_heads) const;
  kernels::AttentionOptions options(const MicroBatchInfo& mb, const uint8_t* key_mask) const;

  void forward(State& s, const kernels::AttentionShape& as, const kernels::AttentionOptions& ao,
               const MicroBatchInfo& mb, const Tensor& qkv, Tensor& out) const;
  // Whether backward needs recompute() first (unfused attention under selective recompute).
  bool recomputes() const { return shared_probs_ && !flash_ && !cp_; }
  // The probabilities again from qkv (`scratch` takes the attention output, dropped).
  void recompute(State& s, const kernels::AttentionShape& as, const kernels::AttentionOptions& ao,
                 const Tensor& qkv, Tensor& scratch) const;
  // d_out -> d_qkv (written); qkv and out as forward had them.
  void backward(State& s, const kernels::AttentionShape& as, const kernels::AttentionOptions& ao,
                const MicroBatchInfo& mb, const Tensor& qkv, const Tensor& out, const Tensor& d_out,
                Tensor& d_qkv) const;

 private:
  Tensor& probs_of(State& s) const { return shared_probs_ ? *shared_probs_ : s.probs; }

  TransformerSpec spec_;  // (the layer's: its window and rope choices already applied)
  Device device_;
  int64_t layer_;
  float scale_;
  bool flash_;
  std::shared_ptr<Tensor> shared_probs_;  // selective recompute only
  std::shared_ptr<const ContextParallelAttention> cp_;
  std::unique_ptr<AttentionSinks> sinks_;
};

}  // namespace megatron
