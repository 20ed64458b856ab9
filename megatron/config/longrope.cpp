// LongRoPE's recipe keys (model.longrope_*): the attention factor and the checks; those of
// dynamic NTK scaling (model.rope_dynamic_factor), the other rope whose frequencies follow the
// sequence length; the layers without rope (model.no_rope_freq) and, beside them, the layers
// without the sliding window (model.window_attn_skip_freq).
#include <cmath>

#include "megatron/config/checker.h"
#include "megatron/config/recipe.h"

namespace megatron::config {

double ModelConfig::longrope_scale_for(double factor, double original) {
  if (!(factor > 1.0)) return 1.0;
  return std::sqrt(1.0 + std::log(factor) / std::log(original));
}

double ModelConfig::longrope_scale() const {
  if (longrope_attention_factor) return *longrope_attention_factor;
  const double original = static_cast<double>(longrope_original_max_position_embeddings);
  return longrope_scale_for(static_cast<double>(max_positions()) / original, original);
}

void validate_longrope(const ModelConfig& m, const Checker& c) {
  if (m.rope_dynamic_factor != 0.0) {
    c.check(m.rope_dynamic_factor >= 1.0, "model.rope_dynamic_factor",
            concat("must be >= 1, or 0 for none (got ", num(m.rope_dynamic_factor), ")"));
    c.check(m.position_embedding == PositionEmbedding::Rope && !m.rope_scaling &&
                m.rotary_seq_len_interpolation_factor == 1.0 && !m.longrope(),
            "model.rope_dynamic_factor",
            "needs position_embedding: rope without another rope scaling");
  }
  if (!m.longrope()) {
    c.check(m.longrope_original_max_position_embeddings == 0,
            "model.longrope_original_max_position_embeddings",
            "needs model.longrope_short_factor and model.longrope_long_factor");
    c.check(!m.longrope_attention_factor, "model.longrope_attention_factor",
            "needs model.longrope_short_factor and model.longrope_long_factor");
    return;
  }
  c.check(m.position_embedding == PositionEmbedding::Rope && !m.rope_scaling &&
              m.rotary_seq_len_interpolation_factor == 1.0,
          "model.longrope_short_factor",
          "needs position_embedding: rope without rope_scaling or linear interpolation");
  const auto pairs = static_cast<size_t>(m.rotary_dims() / 2);
  for (const auto& [key, list] :
       {std::pair{"model.longrope_short_factor", &m.longrope_short_factor},
        std::pair{"model.longrope_long_factor", &m.longrope_long_factor}}) {
    c.check(list->size() == pairs, key,
            concat("must hold rotary dims / 2 = ", pairs, " values, one per rotary pair (got ",
                   list->size(), ")"));
    for (size_t i = 0; i < list->size(); ++i)
      c.check((*list)[i] > 0.0 && std::isfinite((*list)[i]), concat(key, "[", i, "]"),
              concat("must be a positive number (got ", num((*list)[i]), ")"));
  }
  c.positive("model.longrope_original_max_position_embeddings",
             m.longrope_original_max_position_embeddings);
  if (m.longrope_attention_factor)
    c.check(*m.longrope_attention_factor > 0.0, "model.longrope_attention_factor",
            concat("must be > 0 (got ", num(*m.longrope_attention_factor), ")"));
}

void validate_rotary_percent(const ModelConfig& m, const Checker& c) {
  if (m.rotary_percent == 1.0) return;
  c.check(m.rotary_percent > 0.0 && m.rotary_percent <= 1.0, "model.rotary_percent",
          concat("must be in (0, 1] (got ", num(m.rotary_percent), ")"));
  c.check(m.rotary(), "model.rotary_percent",
          "turns part of each head with rotary embeddings: it needs position_embedding: rope or "
          "yarn");
  const int64_t r = m.rotary_dims();
  c.check(r >= 2 && r % 2 == 0, "model.rotary_percent",
          concat("gives int(head_dim ", m.head_dim(), " x ", num(m.rotary_percent), ") = ", r,
                 " rotary dimensions: it must be even and at least 2"));
}

namespace {

// A per-layer choice (LayerFrequency) where 0 means "off": an integer >= 0 or one 0/1 per layer.
// Returns whether it picks anything (so that its requirements apply).
bool check_layer_choice(const Checker& c, const char* key, const LayerFrequency& f,
                        int64_t num_layers, const char* zero_means) {
  if (f.pattern.empty()) {
    c.check(f.every >= 0, key, concat("must be >= 0 (0: ", zero_means, "; got ", f.every, ")"));
    return f.every != 0;
  }
  c.check(static_cast<int64_t>(f.pattern.size()) == num_layers, key,
          concat("a list needs one 0/1 entry per layer (got ", f.pattern.size(), " entries for ",
                 num_layers, " layers)"));
  for (size_t i = 0; i < f.pattern.size(); ++i)
    c.check(f.pattern[i] == 0 || f.pattern[i] == 1, concat(key, "[", i, "]"),
            concat("must be 0 or 1 (got ", f.pattern[i], ")"));
  return true;
}

}  // namespace

void validate_window_skip(const ModelConfig& m, const Checker& c) {
  if (!check_layer_choice(c, "model.window_attn_skip_freq", m.window_attn_skip_freq, m.num_layers,
                          "the window in every layer"))
    return;
  c.check(m.attention_window() > 0, "model.window_attn_skip_freq",
          "picks the layers without a sliding window: it needs model.window_size");
}

void validate_no_rope_freq(const ModelConfig& m, const Checker& c) {
  if (!check_layer_choice(c, "model.no_rope_freq", m.no_rope_freq, m.num_layers,
                          "rope in every layer"))
    return;
  c.check(m.rotary(), "model.no_rope_freq",
          "skips rotary embeddings in some layers: it needs position_embedding: rope or yarn");
}

}  // namespace megatron::config
