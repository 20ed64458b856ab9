#pragma once
// The sizes and options of a transformer's blocks (Megatron's TransformerConfig), shared by the
// block and its attention and MLP sub-layers.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "kernels/common/attention_shape.h"
#include "kernels/common/numeric.h"
#include "megatron/core/dtype.h"
#include "megatron/transformer/layers.h"

namespace megatron {

// Activation recomputation (Megatron's --recompute-granularity); see block.h for what each keeps.
enum class Recompute : uint8_t { None, Selective, Full };
// "none" | "selective" | "full" (training.recompute); throws InputError otherwise.
Recompute parse_recompute(std::string_view name);

struct TransformerSpec {
  int64_t num_layers = 0, hidden = 0, heads = 0, query_groups = 0, ffn = 0;
  // The head dimension (model.kv_channels); 0 -> hidden / heads. The query projection is
  // heads * head_dim() wide, which need not equal hidden.
  int64_t kv_channels = 0;
  int64_t seq_length = 0;
  Norm::Kind norm = Norm::Kind::LayerNorm;
  bool swiglu = false;  // a gated linear unit MLP (fc1 [2, F, D]: gate and up)
  math::GluGate glu_gate = math::GluGate::Silu;  // its gate: SwiGLU's SiLU or GeGLU's tanh GELU
  float glu_limit = 0.0f, glu_offset = 0.0f;     // its clamps and offset (math::Glu)
  math::Glu glu() const { return {glu_gate, glu_limit, glu_offset}; }
  // Norms scale by 1 + weight, the weights starting at 0 (layernorm_zero_centered_gamma; Gemma).
  bool norm_zero_centered_gamma = false;
  // The attention softmax scale (model.softmax_scale; Gemma's query_pre_attn_scalar^-1/2);
  // 0: 1 / sqrt(head_dim).
  float softmax_scale = 0.0f;
  // Attention scores soft-capped to cap * tanh(score / cap) before masking and softmax
  // (model.attn_logit_softcapping; Gemma 2); 0: none.
  float attn_logit_softcap = 0.0f;
  // Attention sinks (model.softmax_type; attention_sinks.h): none, a fixed zero logit
  // (off-by-one) or a learned one per head.
  enum class Sinks : uint8_t { None, Fixed, Learned };
  Sinks attention_sinks = Sinks::None;
  // The rope base of the layers with a sliding window (model.rope_local_base_freq; Gemma 3's
  // local layers, which take no rope scaling either); 0: rope_theta everywhere.
  float rope_local_theta = 0.0f;
  math::Gelu gelu = math::Gelu::Tanh;  // the MLP's (and BERT's head's) GELU when not swiglu
  bool rope = false;
  float rope_theta = 10000.0f;
  float rope_linear_factor = 1.0f;   // linear position interpolation (math::RopeFrequencies)
  float rope_scaling_factor = 0.0f;  // > 0: LLaMA-3.1 frequency scaling (math::RopeFrequencies)
  float rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;  // its wavelength bounds
  float rope_original_max_positions = 8192.0f;
  // > 0: YaRN (math::RopeFrequencies; kernels/common/yarn.h computes these from the recipe)
  float rope_yarn_factor = 0.0f, rope_yarn_low = 0.0f, rope_yarn_range = 1.0f;
  float rope_attention_scale = 1.0f;  // YaRN's (and LongRoPE's) attention factor on cos and sin
  // LongRoPE: per-pair frequency divisors [head_dim / 2], the long ones past
  // longrope_original positions (of the sequence incl. cached tokens); empty: none.
  std::vector<float> longrope_short, longrope_long;
  int64_t rope_rotary_dims = 0;  // partial rotary (model.rotary_percent); 0: the whole head
  int64_t longrope_original = 0;
  // Dynamic NTK (> 0): the base grows once a sequence spans more than rope_dynamic_positions.
  float rope_dynamic_factor = 0.0f;
  int64_t rope_dynamic_positions = 0;
  bool bias = true;
  bool qkv_bias = false;  // the QKV projection has a bias even when `bias` is false
  // Per-head RMSNorm of queries and keys before rope (qk_layernorm; qk_norm.h).
  bool qk_norm = false;
  // The q/k norms over each token's whole query and key projection instead (OLMo-2; qk_norm.h).
  bool qk_norm_whole_projection = false;
  // Norms before each sub-layer (LN1, LN2) and/or on each sub-layer's output before its
  // residual add (TransformerBlock); pre-norm blocks only.
  bool input_norms = true, output_norms = false;
  // Layers (global indices) with full attention although `window` is set
  // (model.window_attn_skip_freq).
  std::vector<int64_t> full_attention_layers;
  // Layers (global indices) that skip rope although `rope` is set (model.no_rope_freq).
  std::vector<int64_t> no_rope_layers;
  bool rope_in_layer(int64_t layer) const {
    return rope &&
           std::find(no_rope_layers.begin(), no_rope_layers.end(), layer) == no_rope_layers.end();
  }
  bool causal = true;
  // Sliding-window attention (kernels::AttentionOptions::window): query i sees keys j with
  // i - j < window; 0: all earlier keys.
  int64_t window = 0;
  bool post_norm = false;  // post-LN (BERT) instead of pre-LN; see TransformerBlock
  // Attention and MLP side by side on the block input (GPT-NeoX's use_parallel_residual):
  // out = x + attn(LN1(x)) + mlp(LN2(x)). (model.parallel_residual)
  bool parallel_residual = false;
  float hidden_dropout = 0.0f, attention_dropout = 0.0f;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  uint64_t seed = 1234;            // dropout seed
  bool sequence_parallel = false;  // activations outside attention/MLP are [S/tp, B, D]
  Recompute recompute = Recompute::None;
  // Layers per parameter unit (ParamStore::begin_unit): what sharded data parallelism gathers
  // and reduces at once (parallel.fsdp_unit_layers).
  int64_t unit_layers = 1;
  // Fused (flash) attention (ops::flash_attention_*): saves the row log-sum-exp lse
  // [B, H/tp, S] instead of the probabilities [B, H/tp, S, S] and recomputes them blockwise in
  // backward; same results as the unfused path to rounding (dropout masks identical). Selective
  // recompute then has nothing to drop and behaves like none. (model.attention_backend)
  bool flash_attention = false;
  // On cuda, whether the fused attention runs on cuDNN (model.attention_backend auto: where
  // cuDNN supports it; fused: always).
  kernels::CudnnUse cudnn_attention = kernels::CudnnUse::Never;
  // The dtype of the activations and their gradients (the model dtype: bf16/fp16 under mixed
  // precision). Statistics (norm mean/rstd, attention probabilities, lse) stay fp32.
  DType activation_dtype = DType::F32;
  // LoRA adapters (peft: lora) on the listed projections (rank 0: none).
  LoraSpec lora;
  bool lora_qkv = false, lora_proj = false, lora_fc1 = false, lora_fc2 = false;
  // The adapter of one projection (none unless targeted); its dropout site is 10 + `site`.
  LoraSpec lora_for(bool target, int64_t layer, int64_t site) const {
    if (!target) return LoraSpec{};
    LoraSpec s = lora;
    s.seed = seed;
    s.layer = layer;
    s.site = 10 + site;
    return s;
  }
  // Multi-latent attention (model.multi_latent_attention; mla.h) when kv_lora_rank > 0: the
  // query low-rank width (0: a plain projection), the key/value latent width, the per-head
  // query/key dimensions without and with rope, and the value dimensions.
  struct Mla {
    int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v = 0;
    bool enabled() const { return kv_lora_rank > 0; }
  } mla;
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / heads; }
  void validate(int64_t tp_size) const;
  // Megatron's scaled init for the output projections of the residual branches.
  float output_init_std() const;
};

}  // namespace megatron
