#pragma once
// Hugging Face Olmo2ForCausalLM (OLMo-2) <-> GPTModel: a LLaMA-style decoder (RMSNorm, SwiGLU,
// rope, grouped queries, no biases) whose norms sit on each sub-layer's output before the
// residual add (post_attention_layernorm, post_feedforward_layernorm: model.sublayer_output_norm
// without input norms) and whose q/k RMSNorms span each token's whole query and key projection
// (q_norm [heads x head_dim], k_norm [kv heads x head_dim]: qk_layernorm_span projection).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kOlmo2 = "Olmo2ForCausalLM";

bool is_hf_olmo2(const std::string& architecture);
// Whether a native model section is one Olmo2ForCausalLM describes (output norms only).
bool is_olmo2_model(const config::ModelConfig& model);
// The model section (InputError naming the file and key for anything it cannot represent).
config::ModelConfig olmo2_model_from_hf(const hf::ConfigJson& config);
nlohmann::ordered_json olmo2_hf_config(const config::ModelConfig& model, const std::string& dtype,
                                       const nlohmann::json& original);
std::vector<hf::TensorMapping> olmo2_mappings(const config::ModelConfig& model,
                                              int64_t padded_vocab);
std::set<std::string> olmo2_ignored_tensors(const config::ModelConfig& model);

}  // namespace megatron::models
