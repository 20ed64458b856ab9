#pragma once
// A transformer block, pre-LN (GPT/LLaMA) or post-LN (the original Transformer and BERT):
//   pre-LN:  mid = x + Dropout(Attn(LN1(x)));   out = mid + Dropout(MLP(LN2(mid)))
//   post-LN: h = LN1(x + Dropout(Attn(x)));     out = LN2(h + Dropout(MLP(h)))
// LN1 is registered as "<prefix>.input_norm" and LN2 as "<prefix>.post_attention_norm" in both
// modes, so in post-LN mode "input_norm" is the norm after the attention residual and
// "post_attention_norm" the one after the MLP residual (HF BERT's attention.output.LayerNorm
// and output.LayerNorm).
// Activations are [S, B, D] (sequence-major as in Megatron) over this micro-batch.
#include <memory>
#include <string>

#include "kernels/cpu/attention.h"
#include "megatron/transformer/layers.h"

namespace megatron {

struct TransformerSpec {
  int64_t num_layers = 0, hidden = 0, heads = 0, query_groups = 0, ffn = 0;
  int64_t seq_length = 0;
  Norm::Kind norm = Norm::Kind::LayerNorm;
  bool swiglu = false;
  bool rope = false;
  float rope_theta = 10000.0f;
  bool bias = true;
  bool causal = true;
  bool post_norm = false;  // post-LN (BERT) instead of pre-LN; see TransformerBlock
  float hidden_dropout = 0.0f, attention_dropout = 0.0f;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  uint64_t seed = 1234;            // dropout seed
  bool sequence_parallel = false;  // activations outside attention/MLP are [S/tp, B, D]
  int64_t head_dim() const { return hidden / heads; }
  void validate(int64_t tp_size) const;
};

class TransformerBlock {
 public:
  struct Ctx {
    Norm::Ctx ln1, ln2;
    Linear::Ctx qkv, proj, fc1, fc2;
    Tensor ln1_out, qkv_out, probs, attn_out, proj_out, mid;  // mid = x + attention branch
    Tensor ln2_out, fc1_out, act_out, fc2_out, out;
    // Post-LN uses the same buffers differently: mid = x + attention branch (what LN1
    // normalises), ln1_out = LN1(mid) (the attention sub-layer's output, the MLP's input),
    // sum2 = ln1_out + MLP branch (what LN2 normalises into out); ln2_out is unused.
    Tensor sum2;
    // scratch for backward
    Tensor d_proj, d_attn, d_qkv, d_ln, d_act, d_fc1, d_mid;
  };

  TransformerBlock(ParamStore& store, const std::string& prefix, int64_t layer_index,
                   const TransformerSpec& spec, parallel::Communicator& tp);

  // x: [S, B, D] ([S/tp, B, D] with sequence parallelism); returns ctx.out.
  // key_mask: optional [B, S] (1 = attend).
  const Tensor& forward(Ctx& ctx, const Tensor& x, const MicroBatchInfo& mb,
                        const uint8_t* key_mask = nullptr) const;
  // d_out: grad w.r.t. the block output; writes dx (grad w.r.t. the block input).
  void backward(Ctx& ctx, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                const uint8_t* key_mask = nullptr) const;
  // One past the highest gradient-buffer offset of this block's parameters: once backward
  // returns, every gradient of the block is final.
  int64_t grad_watermark() const;

 private:
  // The post-LN variants (spec_.post_norm); the public functions dispatch to them.
  const Tensor& forward_post_norm(Ctx& ctx, const Tensor& x, const MicroBatchInfo& mb,
                                  const uint8_t* key_mask) const;
  void backward_post_norm(Ctx& ctx, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                          const uint8_t* key_mask) const;
  kernels::cpu::AttentionShape attention_shape(int64_t S, int64_t B, int64_t batch_offset) const;
  kernels::cpu::AttentionOptions attention_options(const MicroBatchInfo& mb,
                                                   const uint8_t* key_mask) const;
  DropoutSite site(const MicroBatchInfo& mb, int64_t which) const;
  ActivationSlice slice(const MicroBatchInfo& mb, int64_t local_seq) const;
  bool sp() const { return spec_.sequence_parallel && tp_->size() > 1; }

  TransformerSpec spec_;
  int64_t layer_;
  parallel::Communicator* tp_;
  int64_t local_heads_, local_groups_;
  std::unique_ptr<Norm> ln1_, ln2_;
  std::unique_ptr<Linear> qkv_, proj_, fc1_, fc2_;
};

}  // namespace megatron
