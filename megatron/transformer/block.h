#pragma once
// A transformer block, pre-LN (GPT/LLaMA) or post-LN (the original Transformer and BERT):
//   pre-LN:  mid = x + Dropout(Attn(LN1(x)));   out = mid + Dropout(MLP(LN2(mid)))
//   post-LN: h = LN1(x + Dropout(Attn(x)));     out = LN2(h + Dropout(MLP(h)))
// LN1 is registered as "<prefix>.input_norm" and LN2 as "<prefix>.post_attention_norm" in both
// modes, so in post-LN mode "input_norm" is the norm after the attention residual and
// "post_attention_norm" the one after the MLP residual (HF BERT's attention.output.LayerNorm
// and output.LayerNorm).
// Pre-LN blocks may also normalize each sub-layer's output before its residual add
// (TransformerSpec::output_norms: "<prefix>.attention_output_norm", ".mlp_output_norm"), with
// or without LN1 and LN2 (TransformerSpec::input_norms):
//   mid = x + Dropout(ON1(Attn(LN1(x))));   out = mid + Dropout(ON2(MLP(LN2(mid))))
// (OLMo-2: no LN1/LN2; Gemma 2/3: all four, its "sandwich").
// Activations are [S, B, D] (sequence-major as in Megatron) over this micro-batch.
//
// Activation recomputation (TransformerSpec::recompute, Megatron's --recompute-granularity);
// what a block's per-micro-batch Ctx keeps between its forward and its backward:
//   None:      every intermediate of the forward (norm inputs and statistics, qkv, the attention
//              probabilities [B, H/tp, S, S], attention output, projections, residual sums,
//              fc1/activation/fc2 outputs) and the backward scratch.
//   Selective: as None but without the attention probabilities (Megatron's "core attention"
//              recompute): forward computes them in the shared RecomputeWorkspace and backward
//              recomputes them from the saved qkv before the attention backward. With flash
//              attention (TransformerSpec::flash_attention) no probabilities are saved in the
//              first place (only lse [B, H/tp, S]), so selective behaves like None.
//   Full:      only the block's output `out` (the next block's input, i.e. one [S(/tp), B, D]
//              checkpoint per layer; the sequence slice with sequence parallelism) and a view of
//              its input. Forward runs in the shared workspace; backward first re-runs the
//              forward from the saved input into the workspace, then the backward there.
// The attention and MLP sub-layers sit behind interfaces (submodules.h) and are built by the
// BlockSubmodules factories (dense ones by default); the block owns the norms, the residual
// sums and the residual-branch dropout.
// Dropout masks are pure functions of (seed, iteration, layer, site, global indices), so the
// recomputed forward is bit-identical and so are the gradients. The workspace holds nothing
// between calls: every layer, micro-batch and model chunk of a rank can share one, whatever
// the order of forward and backward calls (the pipeline schedules interleave them).
#include <memory>
#include <string>

#include "megatron/transformer/submodules.h"
#include "megatron/transformer/transformer_spec.h"

namespace megatron {

struct RecomputeWorkspace;  // below

class TransformerBlock {
 public:
  struct Ctx {
    Norm::Ctx ln1, ln2;
    std::unique_ptr<LayerState> attention, mlp;  // made by the sub-layers on first use
    // The recompute workspace's Ctx serves every block: blocks whose sub-layers differ (dense
    // and MoE MLPs) keep their states here while another kind is in use.
    std::vector<std::unique_ptr<LayerState>> parked;
    Tensor ln1_out, mid;  // mid = x + attention branch
    Tensor ln2_out, out;
    // Post-LN uses the same buffers differently: mid = x + attention branch (what LN1
    // normalises), ln1_out = LN1(mid) (the attention sub-layer's output, the MLP's input),
    // sum2 = ln1_out + MLP branch (what LN2 normalises into out); ln2_out is unused.
    Tensor sum2;
    // Output norms (spec.output_norms): their contexts and the normalized branch outputs.
    Norm::Ctx on1, on2;
    Tensor attn_normed, mlp_normed, d_normed;
    // scratch for backward (d_branch: a branch's output gradient through its dropout)
    Tensor d_branch, d_ln, d_mid;
    // Full recompute: a view of the block input (the checkpoint backward recomputes from).
    Tensor input;
  };

  // workspace: shared by the blocks of a model (and the model chunks of a rank) under
  // selective or full recompute; created for this block alone when null.
  TransformerBlock(ParamStore& store, const std::string& prefix, int64_t layer_index,
                   const TransformerSpec& spec, parallel::Communicator& tp,
                   std::shared_ptr<RecomputeWorkspace> workspace = nullptr,
                   const BlockSubmodules& submodules = dense_submodules());

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
  // The computation in context c, writing the block output into `out` (c.out, or a
  // full-recompute checkpoint); pre-LN, post-LN (spec_.post_norm) and parallel-residual
  // (spec_.parallel_residual) variants.
  void forward_pre_norm(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                        const uint8_t* key_mask) const;
  void backward_pre_norm(Ctx& c, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                         const uint8_t* key_mask) const;
  void forward_parallel(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                        const uint8_t* key_mask) const;
  void backward_parallel(Ctx& c, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                         const uint8_t* key_mask) const;
  void forward_post_norm(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                         const uint8_t* key_mask) const;
  void backward_post_norm(Ctx& c, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                          const uint8_t* key_mask) const;
  // The residual branches: the sub-layer's output with the residual dropout applied in place.
  const Tensor& attention_branch_forward(Ctx& c, const Tensor& in, const MicroBatchInfo& mb,
                                         const uint8_t* key_mask) const;
  const Tensor& mlp_branch_forward(Ctx& c, const Tensor& in, const MicroBatchInfo& mb) const;
  void attention_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                                 const MicroBatchInfo& mb, const uint8_t* key_mask) const;
  void mlp_branch_backward(Ctx& c, const Tensor& d_branch, Tensor& d_in,
                           const MicroBatchInfo& mb) const;
  const Tensor& through_branch_dropout(Ctx& c, const Tensor& d_out, const MicroBatchInfo& mb,
                                       int64_t which) const;
  Tensor& branch_output(Tensor& y, const Norm* out_norm, Norm::Ctx& norm_ctx, Tensor& normed,
                        const MicroBatchInfo& mb, int64_t which) const;
  const Tensor& into_sublayer(Ctx& c, const Tensor& d_branch, const MicroBatchInfo& mb,
                              int64_t which) const;
  void run_forward(Ctx& c, const Tensor& x, Tensor& out, const MicroBatchInfo& mb,
                   const uint8_t* key_mask) const;
  void run_backward(Ctx& c, const Tensor& d_out, Tensor& dx, const MicroBatchInfo& mb,
                    const uint8_t* key_mask) const;
  DropoutSite site(const MicroBatchInfo& mb, int64_t which) const;
  ActivationSlice slice(const MicroBatchInfo& mb, int64_t local_seq) const;
  bool sp() const { return spec_.sequence_parallel && tp_->size() > 1; }
  DType act() const { return spec_.activation_dtype; }
  bool hidden_dropout_on(const MicroBatchInfo& mb) const {
    return mb.training && spec_.hidden_dropout > 0.0f;
  }

  TransformerSpec spec_;
  Device device_;  // the store's: where the activations live
  int64_t layer_;
  parallel::Communicator* tp_;
  std::unique_ptr<Norm> ln1_, ln2_;  // null without input norms (spec.input_norms false)
  std::unique_ptr<Norm> on1_, on2_;  // the sub-layers' output norms (spec.output_norms)
  std::unique_ptr<AttentionLayer> attention_;
  std::unique_ptr<MlpLayer> mlp_;
  std::shared_ptr<RecomputeWorkspace> workspace_;  // null without recompute
};

// The buffers recomputation works in: the context of the block being (re)computed under full
// recompute, and the attention probabilities under selective recompute. Valid only during one
// block forward or backward call.
struct RecomputeWorkspace {
  TransformerBlock::Ctx block;
  std::shared_ptr<Tensor> probs = std::make_shared<Tensor>();
};

}  // namespace megatron
