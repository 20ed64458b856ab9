#include "models/gpt/hf_rope.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/common/yarn.h"
#include "megatron/core/error.h"
#include "models/registry.h"

namespace megatron::models {

namespace {

// rope_type "yarn" -> position_embedding: yarn. transformers derives a missing factor from
// max_position_embeddings / original_max_position_embeddings and uses the mscale ratio only when
// both are non-zero; an explicit attention_factor must equal the derived concentration.
void read_yarn(const hf::ConfigJson& c, const std::string& key, const nlohmann::json& scaling,
               config::ModelConfig& m) {
  auto number = [&](const char* field) -> std::optional<double> {
    if (!scaling.contains(field) || scaling[field].is_null()) return std::nullopt;
    if (!scaling[field].is_number()) c.fail(key, concat("yarn ", field, " must be a number"));
    return scaling[field].get<double>();
  };
  const std::optional<double> original = number("original_max_position_embeddings");
  if (!original || !(*original > 0))
    c.fail(key, "yarn needs a positive original_max_position_embeddings");
  m.position_embedding = config::PositionEmbedding::Yarn;
  m.yarn_original_max_position_embeddings = static_cast<int64_t>(*original);
  const std::optional<double> factor = number("factor");
  m.yarn_rotary_scaling_factor =
      factor ? *factor : static_cast<double>(m.max_positions()) / *original;
  m.yarn_beta_fast = number("beta_fast").value_or(32.0);
  m.yarn_beta_slow = number("beta_slow").value_or(1.0);
  if (m.yarn_beta_fast == 0.0) m.yarn_beta_fast = 32.0;  // transformers: `or 32`
  if (m.yarn_beta_slow == 0.0) m.yarn_beta_slow = 1.0;
  const std::optional<double> mscale = number("mscale"), all_dim = number("mscale_all_dim");
  if (mscale && all_dim && *mscale != 0.0 && *all_dim != 0.0) {
    m.yarn_mscale = mscale;
    m.yarn_mscale_all_dim = all_dim;
  }
  if (scaling.contains("truncate")) {
    if (!scaling["truncate"].is_boolean()) c.fail(key, "yarn truncate must be true or false");
    m.yarn_correction_range_round_to_int = scaling["truncate"].get<bool>();
  }
  if (const std::optional<double> af = number("attention_factor")) {
    const double derived = math::yarn_concentration(yarn_params(m));
    if (std::abs(*af - derived) > 1e-12 * std::max(1.0, derived))
      c.fail(key, concat("yarn attention_factor ", *af,
                         " differs from the concentration its factor and mscale give (", derived,
                         "); only the derived one converts"));
  }
}

// rope_type "longrope" (Phi-3): per-pair short and long factors over the original context (in
// the rope settings, or config.json's own original_max_position_embeddings as transformers 4
// writes it); an explicit attention_factor, or one derived from an explicit factor, is kept.
void read_longrope(const hf::ConfigJson& c, const std::string& key, const nlohmann::json& scaling,
                   config::ModelConfig& m) {
  auto factors = [&](const char* field) {
    std::vector<double> out;
    if (!scaling.contains(field) || !scaling[field].is_array())
      c.fail(key, concat("longrope needs a list ", field));
    for (const auto& x : scaling[field]) {
      if (!x.is_number()) c.fail(key, concat("longrope ", field, " holds ", x.dump()));
      out.push_back(x.get<double>());
    }
    return out;
  };
  m.longrope_short_factor = factors("short_factor");
  m.longrope_long_factor = factors("long_factor");
  nlohmann::json original;
  if (scaling.contains("original_max_position_embeddings"))
    original = scaling["original_max_position_embeddings"];
  else if (c.has("original_max_position_embeddings"))
    original = c.json()["original_max_position_embeddings"];
  if (!original.is_number_integer() || original.get<int64_t>() <= 0)
    c.fail(key, "longrope needs a positive integer original_max_position_embeddings");
  m.longrope_original_max_position_embeddings = original.get<int64_t>();
  if (scaling.contains("attention_factor") && !scaling["attention_factor"].is_null()) {
    if (!scaling["attention_factor"].is_number())
      c.fail(key, "longrope attention_factor must be a number");
    m.longrope_attention_factor = scaling["attention_factor"].get<double>();
  } else if (scaling.contains("factor") && !scaling["factor"].is_null()) {
    // transformers: the attention factor from this factor instead of max / original positions.
    if (!scaling["factor"].is_number()) c.fail(key, "longrope factor must be a number");
    m.longrope_attention_factor = config::ModelConfig::longrope_scale_for(
        scaling["factor"].get<double>(),
        static_cast<double>(m.longrope_original_max_position_embeddings));
  }
}

}  // namespace

void read_rope(const hf::ConfigJson& c, config::ModelConfig& m) {
  // transformers 5 writes "rope_parameters" {rope_type, rope_theta, ...}; 4.x "rope_theta" and
  // "rope_scaling" {rope_type | type, ...}.
  nlohmann::json scaling;
  if (c.has("rope_parameters")) {
    scaling = c.json()["rope_parameters"];
    if (!scaling.is_object()) c.fail("rope_parameters", "must be an object");
    if (!scaling.contains("rope_theta") || !scaling["rope_theta"].is_number())
      c.fail("rope_parameters", "has no numeric rope_theta");
    m.rope_theta = scaling["rope_theta"].get<double>();
  } else {
    m.rope_theta = c.number_or("rope_theta", 10000.0);
    if (c.has("rope_scaling")) scaling = c.json()["rope_scaling"];
  }
  if (scaling.is_null()) return;
  const std::string key = c.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (scaling.contains("partial_rotary_factor")) {  // Megatron's rotary_percent
    if (!scaling["partial_rotary_factor"].is_number())
      c.fail(key, concat("partial_rotary_factor ", scaling["partial_rotary_factor"].dump(),
                         " is not a number"));
    m.rotary_percent = scaling["partial_rotary_factor"].get<double>();
  }
  std::string type = "default";
  if (scaling.contains("rope_type") && scaling["rope_type"].is_string())
    type = scaling["rope_type"].get<std::string>();
  else if (scaling.contains("type") && scaling["type"].is_string())
    type = scaling["type"].get<std::string>();
  if (type == "default") return;
  if (type == "linear") {  // Megatron's rotary_seq_len_interpolation_factor
    if (!scaling.contains("factor") || !scaling["factor"].is_number() ||
        !(scaling["factor"].get<double>() > 0.0))
      c.fail(key, "linear scaling needs a positive numeric factor");
    m.rotary_seq_len_interpolation_factor = scaling["factor"].get<double>();
    return;
  }
  if (type == "yarn") {
    read_yarn(c, key, scaling, m);
    return;
  }
  if (type == "longrope") {
    read_longrope(c, key, scaling, m);
    return;
  }
  if (type == "dynamic") {
    if (!scaling.contains("factor") || !scaling["factor"].is_number() ||
        !(scaling["factor"].get<double>() >= 1.0))
      c.fail(key, "dynamic scaling needs a numeric factor >= 1");
    m.rope_dynamic_factor = scaling["factor"].get<double>();
    return;
  }
  if (type != "llama3")
    c.fail(key,
           concat("rope type '", type,
                  "' is not implemented (unscaled, \"linear\", \"llama3\", \"yarn\", \"longrope\" "
                  "and \"dynamic\" rotary embeddings convert)"));
  // LLaMA-3.1 scaling, with whatever factors and original context the checkpoint has.
  auto number = [&](const char* field) {
    if (!scaling.contains(field) || !scaling[field].is_number())
      c.fail(key, concat("llama3 scaling needs a numeric ", field));
    return scaling[field].get<double>();
  };
  m.rope_scaling = true;
  m.rope_scaling_factor = number("factor");
  m.rope_scaling_low_freq_factor = number("low_freq_factor");
  m.rope_scaling_high_freq_factor = number("high_freq_factor");
  const double original = number("original_max_position_embeddings");
  if (!(original >= 1.0) || original != std::floor(original) || original > 1e12)
    c.fail(key, concat("llama3 original_max_position_embeddings must be a positive integer (got ",
                       original, ")"));
  m.rope_scaling_original_max_position_embeddings = static_cast<int64_t>(original);
  if (!(m.rope_scaling_factor >= 1.0) || !(m.rope_scaling_low_freq_factor > 0.0) ||
      !(m.rope_scaling_high_freq_factor > m.rope_scaling_low_freq_factor))
    c.fail(key, concat("llama3 scaling needs factor >= 1 and high_freq_factor > low_freq_factor "
                       "> 0 (got ",
                       m.rope_scaling_factor, ", ", m.rope_scaling_high_freq_factor, ", ",
                       m.rope_scaling_low_freq_factor, ")"));
}

namespace {

// Partial rotary embeddings, where transformers keeps them: in rope_parameters (5.x) or at the
// top level (4.x); written when partial or when the original had the key.
void write_partial_rotary(const config::ModelConfig& m, nlohmann::ordered_json& j, bool had_it) {
  if (m.rotary_percent == 1.0 && !had_it) return;
  const bool v5 = j.contains("rope_parameters") && j["rope_parameters"].is_object();
  if (v5) j["rope_parameters"]["partial_rotary_factor"] = m.rotary_percent;
  if (!v5 || j.contains("partial_rotary_factor"))  // (transformers 5's Phi-3 writes both)
    j["partial_rotary_factor"] = m.rotary_percent;
}

void write_longrope(const config::ModelConfig& m, nlohmann::ordered_json& j) {
  using Json = nlohmann::ordered_json;
  Json rope = {{"rope_type", "longrope"},
               {"short_factor", m.longrope_short_factor},
               {"long_factor", m.longrope_long_factor},
               {"original_max_position_embeddings", m.longrope_original_max_position_embeddings}};
  if (m.longrope_attention_factor) rope["attention_factor"] = *m.longrope_attention_factor;
  // transformers 4's Phi-3 keeps the original context at the top level too.
  if (j.contains("original_max_position_embeddings"))
    j["original_max_position_embeddings"] = m.longrope_original_max_position_embeddings;
  if (j.contains("rope_parameters")) {
    rope["rope_theta"] = m.rope_theta;
    j["rope_parameters"] = rope;
  } else {
    j["rope_theta"] = m.rope_theta;
    j["rope_scaling"] = rope;
  }
}

}  // namespace

void write_rope(const config::ModelConfig& m, nlohmann::ordered_json& j) {
  using Json = nlohmann::ordered_json;
  const bool linear = m.rotary_seq_len_interpolation_factor != 1.0;
  const bool dynamic = m.rope_dynamic_factor > 0.0;
  const bool yarn = m.position_embedding == config::PositionEmbedding::Yarn;
  const bool had_partial = j.contains("partial_rotary_factor") ||
                           (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                            j["rope_parameters"].contains("partial_rotary_factor"));
  if (m.longrope()) {
    write_longrope(m, j);
    write_partial_rotary(m, j, had_partial);
    return;
  }
  Json rope = {{"rope_type", dynamic          ? "dynamic"
                             : yarn           ? "yarn"
                             : m.rope_scaling ? "llama3"
                             : linear         ? "linear"
                                              : "default"}};
  if (linear) rope["factor"] = m.rotary_seq_len_interpolation_factor;
  if (dynamic) rope["factor"] = m.rope_dynamic_factor;
  if (yarn) {
    rope["factor"] = m.yarn_rotary_scaling_factor;
    rope["original_max_position_embeddings"] = m.yarn_original_max_position_embeddings;
    rope["beta_fast"] = m.yarn_beta_fast;
    rope["beta_slow"] = m.yarn_beta_slow;
    if (m.yarn_mscale && m.yarn_mscale_all_dim) {
      rope["mscale"] = *m.yarn_mscale;
      rope["mscale_all_dim"] = *m.yarn_mscale_all_dim;
    }
    rope["truncate"] = m.yarn_correction_range_round_to_int;
  }
  if (m.rope_scaling) {
    rope["factor"] = m.rope_scaling_factor;
    rope["low_freq_factor"] = m.rope_scaling_low_freq_factor;
    rope["high_freq_factor"] = m.rope_scaling_high_freq_factor;
    rope["original_max_position_embeddings"] = m.rope_scaling_original_max_position_embeddings;
  }
  if (j.contains("rope_parameters")) {  // transformers 5
    rope["rope_theta"] = m.rope_theta;
    j["rope_parameters"] = rope;
  } else {
    j["rope_theta"] = m.rope_theta;
    j["rope_scaling"] = m.rope_scaling || linear || yarn || dynamic ? rope : Json(nullptr);
  }
  write_partial_rotary(m, j, had_partial);
}

}  // namespace megatron::models
