// ModelConfig::validate, in parts: sizes, rope and its scalings, windows, the block's options.
#include "megatron/config/checker.h"
#include "megatron/config/recipe.h"
#include "megatron/config/scalar.h"
#include "megatron/core/error.h"

namespace megatron::config {

namespace {

void validate_sizes(const ModelConfig& m, const Checker& c) {
  c.positive("model.num_layers", m.num_layers);
  c.positive("model.hidden_size", m.hidden_size);
  // Sizes no model has: refused here, so that no product of them overflows before the
  // memory check (the trainer's, from the planner) can name what does not fit.
  auto at_most = [&](const char* key, int64_t v, int64_t limit) {
    c.check(v <= limit, key, concat("must be <= ", limit, " (got ", v, ")"));
  };
  at_most("model.num_layers", m.num_layers, 100000);
  at_most("model.hidden_size", m.hidden_size, 1 << 20);
  at_most("model.num_attention_heads", m.num_attention_heads, 1 << 16);
  at_most("model.ffn_hidden_size", m.ffn_hidden_size, 1 << 24);
  at_most("model.seq_length", m.seq_length, 1 << 24);
  at_most("model.max_position_embeddings", m.max_position_embeddings, 1 << 24);
  at_most("model.vocab_size", m.vocab_size, (int64_t{1} << 31) - 1);
  at_most("model.kv_channels", m.kv_channels, 1 << 16);
  c.positive("model.num_attention_heads", m.num_attention_heads);
  c.non_negative("model.num_query_groups", m.num_query_groups);
  c.non_negative("model.ffn_hidden_size", m.ffn_hidden_size);
  c.positive("model.seq_length", m.seq_length);
  c.non_negative("model.max_position_embeddings", m.max_position_embeddings);
  // 0 (or null) means hidden_size / num_attention_heads; a negative size is a typo, not "auto".
  c.check(m.kv_channels >= 0, "model.kv_channels",
          concat("must be > 0, or 0/null for hidden_size / num_attention_heads (got ",
                 m.kv_channels, ")"));
  // Only the default head dimension needs the heads to divide the hidden size (Megatron-Core).
  if (m.kv_channels == 0)
    c.divisible("model.hidden_size", m.hidden_size, "model.num_attention_heads",
                m.num_attention_heads);
  if (m.num_attention_heads % m.query_groups() != 0)
    c.fail("model.num_query_groups",
           concat("must divide model.num_attention_heads (got ", m.num_attention_heads, " % ",
                  m.query_groups(), " = ", m.num_attention_heads % m.query_groups(), ")"));
}

void validate_rope(const ModelConfig& m, const Checker& c) {
  c.positive("model.rope_theta", m.rope_theta);
  c.check(m.rope_scaling_factor >= 1.0, "model.rope_scaling_factor",
          concat("must be >= 1 (got ", m.rope_scaling_factor, ")"));
  c.check(!m.rope_scaling || m.position_embedding == PositionEmbedding::Rope, "model.rope_scaling",
          "needs position_embedding: rope");
  c.check(m.rope_scaling_low_freq_factor > 0.0 &&
              m.rope_scaling_high_freq_factor > m.rope_scaling_low_freq_factor,
          "model.rope_scaling_high_freq_factor",
          concat("must be > model.rope_scaling_low_freq_factor > 0 (got ",
                 num(m.rope_scaling_high_freq_factor), " and ", num(m.rope_scaling_low_freq_factor),
                 ")"));
  c.positive("model.rope_scaling_original_max_position_embeddings",
             m.rope_scaling_original_max_position_embeddings);
  c.check(m.rotary_seq_len_interpolation_factor > 0.0, "model.rotary_seq_len_interpolation_factor",
          concat("must be > 0 (got ", num(m.rotary_seq_len_interpolation_factor), ")"));
  if (m.rotary_seq_len_interpolation_factor != 1.0) {
    c.check(m.position_embedding == PositionEmbedding::Rope,
            "model.rotary_seq_len_interpolation_factor", "needs position_embedding: rope");
    c.check(!m.rope_scaling, "model.rotary_seq_len_interpolation_factor",
            "linear interpolation and rope_scaling (LLaMA-3.1's) are exclusive: choose one");
  }
  validate_longrope(m, c);
  const bool yarn = m.position_embedding == PositionEmbedding::Yarn;
  if (yarn) {
    c.check(m.yarn_rotary_scaling_factor >= 1.0, "model.yarn_rotary_scaling_factor",
            concat("must be >= 1 with position_embedding: yarn (got ",
                   num(m.yarn_rotary_scaling_factor), ")"));
    c.check(m.yarn_original_max_position_embeddings > 0,
            "model.yarn_original_max_position_embeddings",
            concat("must be > 0 with position_embedding: yarn (got ",
                   m.yarn_original_max_position_embeddings, ")"));
    c.check(m.yarn_beta_fast > 0.0 && m.yarn_beta_slow > 0.0, "model.yarn_beta_fast",
            concat("yarn_beta_fast and yarn_beta_slow must be > 0 (got ", num(m.yarn_beta_fast),
                   ", ", num(m.yarn_beta_slow), ")"));
    for (const auto& [key, v] : {std::pair{"model.yarn_mscale", m.yarn_mscale},
                                 std::pair{"model.yarn_mscale_all_dim", m.yarn_mscale_all_dim}})
      c.check(!v || *v > 0.0, key, concat("must be > 0 or null (got ", v ? num(*v) : "", ")"));
    // rope_scaling and linear interpolation already need position_embedding: rope.
  } else {
    c.check(m.yarn_rotary_scaling_factor == 0.0, "model.yarn_rotary_scaling_factor",
            "needs position_embedding: yarn");
  }
  // (multi-latent attention turns its own qk_pos_emb_head_dim: mla_config.cpp checks it)
  if (m.rotary() && !m.mla.enabled()) {
    if (m.kv_channels > 0)
      c.check(m.kv_channels % 2 == 0, "model.kv_channels",
              concat("must be even with position_embedding: rope (got ", m.kv_channels, ")"));
    else
      c.check(m.head_dim() % 2 == 0, "model.position_embedding",
              concat("rope needs an even head dimension (got hidden_size / num_attention_heads = ",
                     m.head_dim(), ")"));
  }
}

void validate_window(const ModelConfig& m, const Checker& c) {
  if (!m.window_size.empty()) {
    c.check(m.window_size.size() == 2, "model.window_size",
            concat("must be [left, right] (got ", m.window_size.size(), " values)"));
    if (m.window_size.size() == 2) {
      c.check(m.window_size[0] >= -1, "model.window_size",
              concat("left must be >= 0, or -1 for no limit (got ", m.window_size[0], ")"));
      c.check(m.window_size[1] == 0, "model.window_size",
              concat("right must be 0: a sliding window over earlier keys only (got ",
                     m.window_size[1], ")"));
    }
    c.check(m.arch != Arch::BERT, "model.window_size",
            "sliding-window attention needs a causal model (not bert)");
  }
}

// Norm placement, q/k norms, the parallel residual and Gemma's options.
void validate_block_options(const ModelConfig& m, const Checker& c) {
  c.check(!m.parallel_residual || m.arch != Arch::BERT, "model.parallel_residual",
          "the parallel residual is for the pre-norm decoders (model.arch gpt or llama), not "
          "bert's post-norm layers");
  if (m.qk_layernorm)
    c.check(m.normalization == Normalization::RMSNorm, "model.qk_layernorm",
            "true needs normalization: RMSNorm (the per-head query/key norms are RMSNorms)");
  c.non_negative("model.attn_logit_softcapping", m.attn_logit_softcapping);
  c.check(m.attn_logit_softcapping == 0 || m.attention_backend == AttentionBackend::Auto ||
              m.attention_backend == AttentionBackend::Flash,
          "model.attention_backend",
          concat(option_name(m.attention_backend),
                 " has no soft-capping: model.attn_logit_softcapping runs the flash kernels (use "
                 "flash or auto)"));
  c.check(m.softmax_type == SoftmaxType::Vanilla || m.attention_backend == AttentionBackend::Auto ||
              m.attention_backend == AttentionBackend::Flash,
          "model.attention_backend",
          concat(option_name(m.attention_backend), " has no attention sinks: model.softmax_type ",
                 option_name(m.softmax_type), " runs the flash kernels (use flash or auto)"));
  c.non_negative("model.final_logit_softcapping", m.final_logit_softcapping);
  c.non_negative("model.rope_local_base_freq", m.rope_local_base_freq);
  if (m.softmax_scale) c.positive("model.softmax_scale", *m.softmax_scale);
  c.non_negative("model.activation_func_clamp_value", m.activation_func_clamp_value);
  c.check((m.glu_linear_offset == 0 && m.activation_func_clamp_value == 0) || m.gated_activation(),
          "model.activation",
          concat(option_name(m.activation),
                 " is not gated: model.glu_linear_offset and activation_func_clamp_value apply to "
                 "swiglu, geglu and quick_geglu"));
  c.check(m.activation != Activation::GeGLU || !m.moe.enabled(), "model.activation",
          "geglu experts are not implemented (the routed experts are SwiGLU or GeLU)");
  c.check(m.rope_local_base_freq == 0 || (m.rotary() && m.attention_window() > 0),
          "model.rope_local_base_freq",
          "applies to the layers with a sliding window: it needs rope and model.window_size");
  c.check(m.qk_layernorm || m.qk_layernorm_span == QkNormSpan::Head, "model.qk_layernorm_span",
          "projection needs model.qk_layernorm: true");
  c.check(m.sublayer_input_norm || m.sublayer_output_norm, "model.sublayer_input_norm",
          "false needs model.sublayer_output_norm: true (a block without any norm)");
  c.check((m.sublayer_input_norm && !m.sublayer_output_norm) ||
              (m.arch != Arch::BERT && !m.parallel_residual),
          m.sublayer_input_norm ? "model.sublayer_output_norm" : "model.sublayer_input_norm",
          concat(m.sublayer_input_norm ? "true" : "false",
                 " is for the sequential pre-norm decoders (model.arch gpt or llama without "
                 "parallel_residual)"));
}

}  // namespace

void ModelConfig::validate(const KeyOrigins& origins) const {
  Checker c(origins);
  validate_sizes(*this, c);
  validate_rope(*this, c);
  validate_window(*this, c);
  validate_no_rope_freq(*this, c);
  validate_rotary_percent(*this, c);
  validate_window_skip(*this, c);
  validate_block_options(*this, c);
  if (position_embedding == PositionEmbedding::Learned)
    c.check(
        seq_length <= max_positions(), "model.seq_length",
        concat("must be <= model.max_position_embeddings with learned position embeddings (got ",
               seq_length, " > ", max_positions(), ")"));
  c.unit_interval("model.hidden_dropout", hidden_dropout);
  c.unit_interval("model.attention_dropout", attention_dropout);
  c.positive("model.layernorm_epsilon", layernorm_epsilon);
  c.positive("model.init_method_std", init_method_std);
  c.non_negative("model.vocab_size", vocab_size);
  c.positive("model.make_vocab_size_divisible_by", make_vocab_size_divisible_by);
  moe.validate(origins, num_layers, arch);
  mla.validate(origins, *this);
}

}  // namespace megatron::config
