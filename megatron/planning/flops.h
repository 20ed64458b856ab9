#pragma once
// Model FLOPs per training step with Megatron-LM's formula (num_floating_point_operations in
// megatron/training/training.py), so TFLOP/s and MFU compare directly with Megatron's logs:
//   12 * B * S * L * h^2 * ( (1 + G/H + S/h) * q/h  +  (F/h) * gated  +  V / (2 L h) )
// with q = heads * head_dim, G query groups, F the FFN size, gated = 3/2 for SwiGLU, V the
// padded vocabulary. It counts forward + backward (3x forward) without recomputation and
// without halving causal attention. With mixture of experts the MLP term counts the active
// parameters, as Megatron's MoE formula: per MoE layer (moe_ffn * topk + shared_ffn) * gated
// in place of F * gated, averaged over the layers (routing as configured, not as balanced).
// Multi-latent attention replaces the attention term by Megatron's MLA count per token and layer,
//   6 * (q + kv_lora_rank (h + H (Dn + Dv) + 1) + h Dr + H Dv h + S H (Dn + Dr) / 2 + S H Dv / 2)
// with q = q_lora_rank (h + H (Dn + Dr) + 1), or h H (Dn + Dr) without the low-rank path (its
// core attention counted causally, as Megatron does there).
#include <cstdint>

#include "kernels/cpu/cpu_peak.h"
#include "megatron/config/moe_config.h"
#include "megatron/core/dtype.h"
#include "megatron/transformer/transformer_spec.h"

namespace megatron::planning {

struct FlopsModel {
  int64_t num_layers, hidden, heads, query_groups, head_dim, ffn, seq_length, padded_vocab;
  bool swiglu = false;
  int64_t moe_layers = 0, moe_ffn = 0, moe_topk = 0, shared_ffn = 0;  // MoE: active MLPs
  TransformerSpec::Mla mla = {};  // multi-latent attention (kv_lora_rank > 0)
};

double megatron_flops_per_step(const FlopsModel& m, int64_t global_batch_size);
// The model of a transformer with a padded vocabulary of padded_vocab rows.
FlopsModel flops_model_from_spec(const TransformerSpec& t, int64_t padded_vocab);
// The same with the MoE layers of a model section (no change for a dense one).
FlopsModel with_moe(FlopsModel m, const config::MoeConfig& moe);

// The hardware peak of this CPU for a compute dtype, on the current thread count: fp32 (and
// fp16, computed in fp32) = the widest FMA; bf16 = the faster of the bf16 instructions (AMX,
// AVX-512 BF16) and the fp32 FMA. Register-only loops (kernels/cpu/cpu_peak.h), so it is what
// the hardware can do, not what a library reaches: the denominator of MFU.
kernels::cpu::PeakFlops measure_cpu_peak(DType compute_dtype);

// The FLOP/s a large GEMM reaches through the GEMM path in use (fp32 sgemm, or the bf16 GEMM
// when bf16 runs natively), on the current thread count: shown beside MFU as "of measured gemm".
double measure_cpu_gemm_flops(DType compute_dtype);

}  // namespace megatron::planning
