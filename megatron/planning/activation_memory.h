#pragma once
// The planner's activation memory (internal to megatron/planning): the bytes one micro-batch
// keeps for each piece of a model chunk on the CPU and on CUDA, and the fp32 copies of 16-bit
// CPU ops. planner.h documents the formulas; the memory tests compare them with measured peaks.
#include <algorithm>
#include <utility>

#include "megatron/config/options.h"
#include "megatron/planning/model_dims.h"
#include "megatron/planning/planner.h"

namespace megatron::planning::detail {

// Activation bytes of one micro-batch for the pieces of a model chunk.
struct Activations {
  const Dims& d;
  const Layout& lay;
  bool cuda;
  bool flash;
  double a;    // bytes per activation element
  double V;    // padded vocab
  double s;    // sequence per context-parallel rank
  double b;    // micro-batch
  double t;    // tensor parallel
  double spd;  // sequence-parallel divisor (t or 1)

  // What a deferred weight-gradient pass (zero-bubble schedules) keeps copied for one layer: the
  // inputs and output gradients of its QKV, projection, fc1 and fc2 GEMMs (full sequence).
  double layer_weight_grad_copies() const {
    const double D = static_cast<double>(d.D), H = static_cast<double>(d.H),
                 G = static_cast<double>(d.G), Dh = static_cast<double>(d.Dh),
                 F = static_cast<double>(d.F), fc1 = static_cast<double>(d.fc1);
    return s * b * a * (4 * D + ((H + 2 * G) * Dh + H * Dh + fc1 + F) / t);
  }

  // One layer with every activation kept (no recompute), split as (rest, attention core).
  std::pair<double, double> layer() const {
    const double D = static_cast<double>(d.D), H = static_cast<double>(d.H),
                 G = static_cast<double>(d.G), Dh = static_cast<double>(d.Dh),
                 F = static_cast<double>(d.F), fc1 = static_cast<double>(d.fc1),
                 S = static_cast<double>(d.S);
    const bool drop = d.hidden_dropout > 0;
    if (cuda) {
      const double rep = s * b * D * (4 * a + (drop ? 2 : 0)) / spd;
      const double qk = d.qk_norm ? (H + 2 * G) * Dh : 0;  // the q/k norms' inputs
      const double tensor = s * b * a * (2 * H * Dh + 2 * G * Dh + qk + (fc1 + F)) / t;
      const double core = flash ? 4 * b * H * s / t
                                : b * H * s * S * (a + (d.attention_dropout > 0 ? 1 + a : 0)) / t;
      return {rep + tensor, core};
    }
    // CPU: the TransformerBlock::Ctx tensors (activations in the model dtype, norm statistics
    // fp32), forward and the backward scratch.
    const double rows = s * b / spd, full = s * b;
    const double nst = d.layernorm ? 2 : 1;
    const double qkvw = (H + 2 * G) * Dh / t, attnw = H * Dh / t, fc1w = fc1 / t, Fl = F / t;
    // qk_layernorm keeps the projection before its norms too, and fp32 statistics per head.
    const double qk = d.qk_norm ? qkvw : 0;
    const double fwd = rows * 6 * D + full * (qkvw + qk + attnw + fc1w + Fl);
    const double stats = rows * 2 * nst + (d.qk_norm ? full * (H + G) / t : 0);
    const double bwd = rows * D * (2 + (drop ? 1 : 0)) + full * (Fl + fc1w + attnw + qkvw);
    // probs [b, H/t, s, s] (fp32); flash attention keeps only lse [b, H/t, s]
    const double core = flash ? b * H / t * s : b * H / t * s * S;
    return {a * (fwd + bwd) + 4 * stats, 4 * core};
  }
  double layer_input() const { return a * s * b * static_cast<double>(d.D) / spd; }
  // What an MoE layer holds beyond layer()'s with a dense MLP replaced: the experts' rows for
  // the busiest rank (topk x imbalance per token) in place of the dense MLP, the shared expert,
  // the dispatch and combine buffers, the fp32 router statistics. Split experts see the whole
  // micro-batch's rows with 1/t of each expert; whole experts (folded) this rank's slice.
  double moe_delta() const {
    const double D = static_cast<double>(d.D), full = s * b, rows = s * b / spd;
    const double k = static_cast<double>(d.topk), f = d.imbalance;
    const double routed = lay.experts_fold_tp() ? rows : full;
    const double et = static_cast<double>(lay.expert_tp());
    const double dense_mlp = a * full * (d.fc1 + d.F) / t * (cuda ? 1 : 2);
    const double experts = a * routed * k * f * (d.moe_fc1 + d.moe_ffn) / et * (cuda ? 1 : 2);
    const double shared =
        a * full * static_cast<double>(d.shared_fc1 + d.shared_ffn) / t * (cuda ? 1 : 2);
    // rows in and out (x2 for backward) at the experts, the returned rows, fp32 combine rows.
    const double buffers = a * routed * k * D * (4 * f + 2) + 4 * rows * k * D * 2;
    const double router = 4 * rows * (D + 2 * static_cast<double>(d.E));
    return experts + shared + buffers + router - dense_mlp;
  }

  // Per-micro-batch bytes outside the layers (embeddings; final norm, logits, loss).
  double pre() const {
    const double D = static_cast<double>(d.D), rows = s * b / spd;
    if (cuda) return d.hidden_dropout > 0 ? rows * D : 0;         // embedding dropout mask
    double n = a * rows * D;                                      // embedded
    if (!d.rope) n += 4 * rows;                                   // int32 positions
    if (d.hidden_dropout > 0) n += a * rows * D;                  // embedding dropout output
    if (d.bert) n += a * 2 * rows * D + 4 * 2 * rows + 4 * rows;  // sum scratch, norm, types
    return n;
  }
  double post() const {
    const double D = static_cast<double>(d.D), rows = s * b / spd, full = s * b;
    if (cuda) {
      double n = 2 * a * rows * D + 4 * full * V / t;  // final norm + output inputs, fp32 softmax
      if (d.bert) n += a * rows * D;                   // the MLM transform's activation input
      return n;
    }
    const double nst = d.layernorm ? 2 : 1;
    double n = a * full * V / t + 4 * 3 * full;  // logits; fp32 losses, lse, d(losses)
    if (lay.sequence_parallel && d.tied) n += a * 2 * full * D;  // gathered head input + grad
    if (d.bert)  // MLM transform / GELU / norm outputs and their grads, pooler + NSP head
      n += a * (5 * rows * D + (d.binary_head ? 5 * b * D : 0)) + 4 * 2 * rows;
    else
      n += 4 * nst * rows + a * rows * D;  // final norm
    return n;
  }
  // Per activation set regardless of the chunk: ping-pong gradients (CPU), micro-batch ids,
  // pipeline receive buffers.
  double common(bool has_pre, bool has_post) const {
    const double D = static_cast<double>(d.D), rows = s * b / spd, full = s * b;
    if (cuda) return 0;
    double n = 2 * a * rows * D;
    if (has_pre || has_post) n += (d.bert ? 13 : 8) * full;  // int32 tokens, labels (+ types, mask)
    if (lay.pp > 1 && !has_pre) n += 2 * a * rows * D;
    return n;
  }
};

// The fp32 copies 16-bit CPU ops make for one call (bytes; the largest call counts): attention
// widens q/k/v, the output and their gradients whole (backward: qkv, out, d(out), d(qkv)); a
// linear layer without native 16-bit GEMMs (fp16, or bf16 on a CPU without bf16 instructions)
// widens its weight and one block of input and output rows (kernels::cpu::widened_gemm_block_rows).
// The cross entropy widens fp16 logits (measured: the forward's copy is the one at the peak).
// The elementwise ops, norms and embeddings read 16-bit tensors as stored, and so does the cross
// entropy bf16 logits.
double cpu_widening_workspace(const Dims& d, config::Precision precision, int64_t V, double t,
                              double tokens, bool last_stage);

}  // namespace megatron::planning::detail
