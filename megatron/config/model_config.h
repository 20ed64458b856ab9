#pragma once
// The model section of a recipe (Megatron-Core's key names where one exists): sizes, norms,
// activation, positions and rope scalings, windows, the block's options and the mixture of
// experts (moe_config.h). Validated by validate_model.cpp; turned into a model by
// models/registry.h.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/key_info.h"
#include "megatron/config/mla_config.h"
#include "megatron/config/moe_config.h"
#include "megatron/config/options.h"

namespace megatron::config {

// Where each key of a loaded recipe came from, so that validate() can name the file and line.
// Keys are full paths: "model.num_layers", "data.train[0].path".
struct KeyOrigins {
  std::string fallback;                       // the top recipe file: used for keys left at default
  std::map<std::string, std::string> by_key;  // "model.num_layers" -> "recipes/x.yaml:12"
  std::string of(const std::string& key) const;  // by_key[key], else fallback (may be empty)
};

struct ModelConfig {
  Arch arch = Arch::GPT;
  int64_t num_layers = 0, hidden_size = 0, num_attention_heads = 0;  // required
  int64_t num_query_groups = 0;         // 0 -> = num_attention_heads (no GQA)
  int64_t ffn_hidden_size = 0;          // 0 -> 4 * hidden_size
  int64_t seq_length = 0;               // required
  int64_t max_position_embeddings = 0;  // 0 -> seq_length
  // The attention head dimension (Megatron-Core's kv_channels, Hugging Face's head_dim); 0 ->
  // hidden_size / num_attention_heads. Mistral-NeMo and Qwen3 set it apart from hidden / heads.
  int64_t kv_channels = 0;
  Normalization normalization = Normalization::LayerNorm;
  Activation activation = Activation::GeLU;
  // The gated unit's offset and clamps (Megatron-Core's glu_linear_offset and
  // activation_func_clamp_value; GPT-OSS: 1 and 7): act(min(gate, c)) * (clamp(up, -c, c) +
  // offset); 0: none.
  double glu_linear_offset = 0, activation_func_clamp_value = 0;
  bool gated_activation() const {
    return activation == Activation::SwiGLU || activation == Activation::GeGLU ||
           activation == Activation::QuickGeGLU;
  }
  PositionEmbedding position_embedding = PositionEmbedding::Learned;
  AttentionBackend attention_backend = AttentionBackend::Auto;
  double rope_theta = 10000;
  // LLaMA-3.1's rotary frequency scaling (Megatron-Core's rope_scaling / rope_scaling_factor;
  // HF rope_type "llama3"): wavelengths longer than original / low_freq_factor are stretched by
  // the factor, shorter than original / high_freq_factor kept, blended between. Megatron-Core
  // fixes low 1, high 4 and 8192 original positions; LLaMA-3.2 and others set their own.
  bool rope_scaling = false;
  double rope_scaling_factor = 8.0;
  double rope_scaling_low_freq_factor = 1.0, rope_scaling_high_freq_factor = 4.0;
  int64_t rope_scaling_original_max_position_embeddings = 8192;
  // Linear position interpolation (Megatron-LM's --rotary-seq-len-interpolation-factor; Hugging
  // Face's rope_type "linear"): every rotary frequency divided by this factor; 1: none.
  double rotary_seq_len_interpolation_factor = 1.0;
  // Partial rotary embeddings (Megatron-Core's rotary_percent; HF partial_rotary_factor): the
  // first int(head_dim * rotary_percent) dimensions of each head turn, the rest pass through.
  double rotary_percent = 1.0;
  // YaRN (position_embedding: yarn, rotary embeddings with YaRN's frequencies and concentration;
  // Megatron's yarn_* keys, Hugging Face's rope_type "yarn").
  double yarn_rotary_scaling_factor = 0;              // required with yarn (>= 1)
  int64_t yarn_original_max_position_embeddings = 0;  // required with yarn
  double yarn_beta_fast = 32, yarn_beta_slow = 1;
  std::optional<double> yarn_mscale, yarn_mscale_all_dim;  // both set: their concentration ratio
  bool yarn_correction_range_round_to_int = true;
  // Dynamic NTK scaling (HF rope_type "dynamic"): > 0: a forward whose sequence (cached tokens
  // included) spans L > max_positions() positions uses the rotary base
  // theta * (factor * L / max_positions - (factor - 1))^(d / (d - 2)); 0: none.
  double rope_dynamic_factor = 0;
  // LongRoPE (Phi-3; HF rope_type "longrope"): rotary pair i turns at theta^(-2i/d) / factor[i],
  // with the long factors when the sequence (incl. the cached tokens) is longer than
  // longrope_original_max_position_embeddings, else the short ones; cos and sin scaled by the
  // attention factor (unset: sqrt(1 + ln(max_positions / original) / ln(original)), 1 when not
  // longer). Both lists empty: none; else head_dim / 2 positive values each.
  std::vector<double> longrope_short_factor, longrope_long_factor;
  int64_t longrope_original_max_position_embeddings = 0;
  std::optional<double> longrope_attention_factor;
  bool longrope() const { return !longrope_short_factor.empty() || !longrope_long_factor.empty(); }
  double longrope_scale() const;  // the attention factor, given or derived
  // LongRoPE's attention factor for a context `factor` times the original one:
  // sqrt(1 + ln(factor) / ln(original)), 1 when not longer.
  static double longrope_scale_for(double factor, double original);
  // Sliding-window attention (Megatron-Core's window_size, flash-attention's (left, right)):
  // query i sees keys i - left .. i + right; empty (null): every earlier key. Causal models
  // only, right = 0 (Mistral's sliding_window W is [W - 1, 0]).
  std::vector<int64_t> window_size;
  // Layers with full attention among sliding-window ones (Megatron-Core's
  // window_attn_skip_freq): an integer N gives every N-th layer full attention (layers N-1,
  // 2N-1, ...; 0: none), a list one 0/1 per layer (1: the sliding window, 0: full attention;
  // Qwen2's max_window_layers, SmolLM3's windows on its NoPE layers). Needs window_size.
  LayerFrequency window_attn_skip_freq{0, {}};
  // The sliding window of `layer` in keys: attention_window(), or 0 where it has full attention.
  int64_t layer_window(int64_t layer) const {
    const LayerFrequency& f = window_attn_skip_freq;
    const bool full = f.pattern.empty() ? f.every > 0 && (layer + 1) % f.every == 0
                                        : f.pattern.at(static_cast<size_t>(layer)) == 0;
    return full ? 0 : attention_window();
  }
  // The sliding window in keys (left + 1), 0 without one.
  int64_t attention_window() const {
    return window_size.size() == 2 && window_size[0] >= 0 ? window_size[0] + 1 : 0;
  }
  bool tie_embeddings = true;
  bool add_bias = true;
  bool add_qkv_bias = false;  // biases on the QKV projection even without add_bias (Qwen2)
  // Per-head RMSNorm of the queries and keys before rotary embeddings (Megatron-Core's
  // qk_layernorm; Qwen3's q_norm / k_norm). RMSNorm models only.
  bool qk_layernorm = false;
  // What one q/k norm statistic spans: each head, or (projection: OLMo-2) a token's whole
  // query and whole key projection, with weights [heads x head_dim] and [groups x head_dim].
  QkNormSpan qk_layernorm_span = QkNormSpan::Head;
  // Where the blocks' norms sit (pre-norm decoders): before each sub-layer (the input norms:
  // LN1 and LN2) and/or on each sub-layer's output before its residual add (OLMo-2's
  // post_attention / post_feedforward norms without input norms; Gemma 2/3's sandwich with both).
  bool sublayer_input_norm = true;
  bool sublayer_output_norm = false;
  // Norms scale by 1 + weight, the weights starting at 0 (Megatron-Core's
  // layernorm_zero_centered_gamma; Gemma's RMSNorm, its q/k norms included).
  bool layernorm_zero_centered_gamma = false;
  // The attention softmax scale (Megatron-Core's softmax_scale; Gemma's
  // query_pre_attn_scalar^-1/2); null: 1 / sqrt(head dim).
  std::optional<double> softmax_scale;
  // Soft-capping, cap * tanh(x / cap), of the attention scores before masking and softmax and of
  // the output logits (Gemma 2's attn_logit_softcapping / final_logit_softcapping); 0: none.
  double attn_logit_softcapping = 0, final_logit_softcapping = 0;
  // Attention sinks (Megatron-Core's softmax_type; kernels/cpu/attention_sinks.h): off-by-one
  // adds exp(0) to every softmax denominator, learnable a learned per-head logit (the parameter
  // layers.L.attention.softmax_offset, split over tp with the heads). Runs the flash kernels.
  SoftmaxType softmax_type = SoftmaxType::Vanilla;
  // Embeddings multiplied by sqrt(hidden_size), rounded to the activation dtype (Gemma).
  bool scale_embeddings_by_sqrt_hidden = false;
  // The rope base of layers with a sliding window, which then take no rope scaling either
  // (Gemma 3's rope_local_base_freq); 0: rope_theta in every layer.
  double rope_local_base_freq = 0;
  // Attention and MLP side by side, each through its own norm, into one residual sum (GPT-NeoX /
  // Pythia: HF use_parallel_residual): out = x + attn(LN1(x)) + mlp(LN2(x)).
  bool parallel_residual = false;
  // Layers without rotary embeddings (Megatron-Core's no_rope_freq; SmolLM3's NoPE layers): an
  // integer N skips rope in every N-th layer (layers N-1, 2N-1, ...; 0: none), a list holds one
  // 0/1 per layer (1: no rope). Rope models only.
  LayerFrequency no_rope_freq{0, {}};
  bool skips_rope(int64_t layer) const {
    if (!no_rope_freq.pattern.empty())
      return no_rope_freq.pattern.at(static_cast<size_t>(layer)) != 0;
    return no_rope_freq.every > 0 && (layer + 1) % no_rope_freq.every == 0;
  }
  double hidden_dropout = 0, attention_dropout = 0;  // in [0, 1)
  double layernorm_epsilon = 1e-5;
  double init_method_std = 0.02;
  int64_t vocab_size = 0;  // 0 -> from the tokenizer
  int64_t make_vocab_size_divisible_by = 128;
  MoeConfig moe;  // mixture of experts (model.num_experts, model.moe_*): moe_config.h
  MlaConfig mla;  // multi-latent attention (model.multi_latent_attention, ...): mla_config.h

  int64_t query_groups() const {
    return num_query_groups > 0 ? num_query_groups : num_attention_heads;
  }
  int64_t ffn() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // The query/key head dimension (multi-latent attention: with its rope part).
  int64_t head_dim() const {
    if (mla.enabled()) return mla.qk_dims();
    if (kv_channels > 0) return kv_channels;
    return num_attention_heads > 0 ? hidden_size / num_attention_heads : 0;
  }
  // The dimensions of a head that rotary embeddings turn (Megatron's and HF's int(): truncated).
  // (Multi-latent attention: its qk_pos_emb_head_dim.)
  int64_t rotary_dims() const {
    if (mla.enabled()) return mla.qk_pos_emb_head_dim;
    return static_cast<int64_t>(static_cast<double>(head_dim()) * rotary_percent);
  }
  // Whether training on `device` (training.device) uses the flash attention kernels: auto picks
  // them on cuda, and on the cpu from kCpuFlashFromSeq positions on, where they are faster than
  // the unfused kernels (bench_cp --attention [--unfused]) and the unfused [B, H, S, S]
  // probabilities of every layer start to weigh (8 heads at 8K: 2 GiB a layer).
  static constexpr int64_t kCpuFlashFromSeq = 1024;
  bool flash_attention(TrainingDevice device) const {
    if (attention_backend != AttentionBackend::Auto)
      return attention_backend == AttentionBackend::Flash ||
             attention_backend == AttentionBackend::Fused;
    return device == TrainingDevice::CUDA || seq_length >= kCpuFlashFromSeq;
  }
  int64_t max_positions() const {
    return max_position_embeddings > 0 ? max_position_embeddings : seq_length;
  }
  // Rotary embeddings (plain or with YaRN's frequencies).
  bool rotary() const {
    return position_embedding == PositionEmbedding::Rope ||
           position_embedding == PositionEmbedding::Yarn;
  }
  // The embedding-table rows: vocab_size if set, else tokenizer_vocab, rounded up to a multiple of
  // make_vocab_size_divisible_by * tensor_parallel (Megatron's padding rule).
  int64_t padded_vocab_size(int64_t tokenizer_vocab, int64_t tensor_parallel = 1) const;

  void validate() const { validate(KeyOrigins{}); }
  void validate(const KeyOrigins& origins) const;
  bool operator==(const ModelConfig&) const = default;

  template <typename Self, typename V>
  static void fields(Self& s, V& v) {
    v("arch", s.arch);
    v("num_layers", s.num_layers, required_key());
    v("hidden_size", s.hidden_size, required_key());
    v("num_attention_heads", s.num_attention_heads, required_key());
    v("num_query_groups", s.num_query_groups,
      noted(auto_note(s.num_query_groups, s.query_groups())));
    v("kv_channels", s.kv_channels, noted(auto_note(s.kv_channels, s.head_dim())));
    v("ffn_hidden_size", s.ffn_hidden_size, noted(auto_note(s.ffn_hidden_size, s.ffn())));
    v("seq_length", s.seq_length, required_key());
    v("max_position_embeddings", s.max_position_embeddings,
      noted(auto_note(s.max_position_embeddings, s.max_positions())));
    v("normalization", s.normalization);
    v("activation", s.activation);
    v("glu_linear_offset", s.glu_linear_offset);
    v("activation_func_clamp_value", s.activation_func_clamp_value);
    v("position_embedding", s.position_embedding);
    v("attention_backend", s.attention_backend);
    v("rope_theta", s.rope_theta);
    v("rope_scaling", s.rope_scaling);
    v("rope_scaling_factor", s.rope_scaling_factor);
    v("rope_scaling_low_freq_factor", s.rope_scaling_low_freq_factor);
    v("rope_scaling_high_freq_factor", s.rope_scaling_high_freq_factor);
    v("rope_scaling_original_max_position_embeddings",
      s.rope_scaling_original_max_position_embeddings);
    v("rotary_seq_len_interpolation_factor", s.rotary_seq_len_interpolation_factor);
    v("rotary_percent", s.rotary_percent);
    v("yarn_rotary_scaling_factor", s.yarn_rotary_scaling_factor);
    v("yarn_original_max_position_embeddings", s.yarn_original_max_position_embeddings);
    v("yarn_beta_fast", s.yarn_beta_fast);
    v("yarn_beta_slow", s.yarn_beta_slow);
    v("yarn_mscale", s.yarn_mscale);
    v("yarn_mscale_all_dim", s.yarn_mscale_all_dim);
    v("yarn_correction_range_round_to_int", s.yarn_correction_range_round_to_int);
    v("rope_dynamic_factor", s.rope_dynamic_factor);
    v("longrope_short_factor", s.longrope_short_factor);
    v("longrope_long_factor", s.longrope_long_factor);
    v("longrope_original_max_position_embeddings", s.longrope_original_max_position_embeddings);
    v("longrope_attention_factor", s.longrope_attention_factor);
    v("window_size", s.window_size);
    v("window_attn_skip_freq", s.window_attn_skip_freq);
    v("tie_embeddings", s.tie_embeddings);
    v("add_bias", s.add_bias);
    v("add_qkv_bias", s.add_qkv_bias);
    v("qk_layernorm", s.qk_layernorm);
    v("qk_layernorm_span", s.qk_layernorm_span);
    v("sublayer_input_norm", s.sublayer_input_norm);
    v("sublayer_output_norm", s.sublayer_output_norm);
    v("layernorm_zero_centered_gamma", s.layernorm_zero_centered_gamma);
    v("softmax_scale", s.softmax_scale);
    v("attn_logit_softcapping", s.attn_logit_softcapping);
    v("softmax_type", s.softmax_type);
    v("final_logit_softcapping", s.final_logit_softcapping);
    v("scale_embeddings_by_sqrt_hidden", s.scale_embeddings_by_sqrt_hidden);
    v("rope_local_base_freq", s.rope_local_base_freq);
    v("parallel_residual", s.parallel_residual);
    v("no_rope_freq", s.no_rope_freq);
    v("hidden_dropout", s.hidden_dropout);
    v("attention_dropout", s.attention_dropout);
    v("layernorm_epsilon", s.layernorm_epsilon);
    v("init_method_std", s.init_method_std);
    v("vocab_size", s.vocab_size, noted(s.vocab_size == 0 ? "auto: from the tokenizer" : ""));
    v("make_vocab_size_divisible_by", s.make_vocab_size_divisible_by);
    MoeConfig::fields(s.moe, v);
    MlaConfig::fields(s.mla, v);
  }
};

}  // namespace megatron::config
