#pragma once
// Hugging Face GPTNeoXForCausalLM (GPT-NeoX, Pythia) <-> GPTModel: layer norms with biases, partial
// rotary embeddings (rotary_pct: Megatron's rotary_percent), the parallel residual
// (use_parallel_residual: model.parallel_residual), biases on every projection, an untied head
// (embed_out, or lm_head as transformers 5 names it). Its fused query_key_value is laid out per
// head as [q, k, v] rows: the native fused QKV of a model without grouped queries, copied as is.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kGptNeoX = "GPTNeoXForCausalLM";

bool is_hf_neox(const std::string& architecture);
// Whether a native model section is one GPTNeoXForCausalLM describes: layer norms with rotary
// embeddings (GPT-2 has learned positions, the LLaMA family RMSNorm).
bool is_neox_model(const config::ModelConfig& model);
// The model section (InputError naming the file and key for anything it cannot represent).
config::ModelConfig neox_model_from_hf(const hf::ConfigJson& config);
nlohmann::ordered_json neox_hf_config(const config::ModelConfig& model, const std::string& dtype,
                                      const nlohmann::json& original);
std::vector<hf::TensorMapping> neox_mappings(const config::ModelConfig& model, int64_t padded_vocab,
                                             const std::string& head_name);
std::set<std::string> neox_ignored_tensors(const config::ModelConfig& model);

}  // namespace megatron::models
