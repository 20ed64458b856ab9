// LongRoPE's recipe keys (model.longrope_*): the attention factor and the checks; those of
// dynamic NTK scaling (model.rope_dynamic_factor), the other rope whose frequencies follow the
// sequence length; and the layers without rope (model.no_rope_freq).
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

void validate_no_rope_freq(const ModelConfig& m, const Checker& c) {
  const LayerFrequency& f = m.no_rope_freq;
  if (f.pattern.empty()) {
    c.check(f.every >= 0, "model.no_rope_freq",
            concat("must be >= 0 (0: rope in every layer; got ", f.every, ")"));
    if (f.every == 0) return;
  } else {
    c.check(static_cast<int64_t>(f.pattern.size()) == m.num_layers, "model.no_rope_freq",
            concat("a list needs one 0/1 entry per layer (got ", f.pattern.size(), " entries for ",
                   m.num_layers, " layers)"));
    for (size_t i = 0; i < f.pattern.size(); ++i)
      c.check(f.pattern[i] == 0 || f.pattern[i] == 1, concat("model.no_rope_freq[", i, "]"),
              concat("must be 0 or 1 (got ", f.pattern[i], ")"));
  }
  c.check(m.rotary(), "model.no_rope_freq",
          "skips rotary embeddings in some layers: it needs position_embedding: rope or yarn");
}

}  // namespace megatron::config
