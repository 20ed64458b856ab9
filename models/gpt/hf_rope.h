#pragma once
// Rotary-embedding settings of Hugging Face decoder configs <-> the recipe's model section:
// transformers 4's "rope_theta" + "rope_scaling" {rope_type | type, ...} and transformers 5's
// "rope_parameters" {rope_type, rope_theta, ...}, for the rope types this build computes
// (default, linear, llama3, yarn). Anything else is an InputError naming the file and key.
#include <nlohmann/json.hpp>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"

namespace megatron::models {

// Sets m.rope_theta and the scaling keys from config.json.
void read_rope(const hf::ConfigJson& c, config::ModelConfig& m);
// Writes the model's rope settings into config.json `j`, in the spelling `j` already uses
// (rope_parameters when it has that key, else rope_theta + rope_scaling).
void write_rope(const config::ModelConfig& m, nlohmann::ordered_json& j);

}  // namespace megatron::models
