#pragma once
// Hugging Face decoder architectures <-> GPTModel: GPT2LMHeadModel, LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM (per-head q/k norms: qk_layernorm) and
// MixtralForCausalLM. config.json <-> the recipe's
// model section, and the tensor name map (megatron/hf/tensor_map.h): GPT-2's Conv1D weights are
// transposed and its [q|k|v] regrouped per head, LLaMA-style q/k/v are interleaved per query
// group into the fused QKV, gate and up are stacked into fc1 [2, F, D], vocabulary tables are
// padded with zero rows on import and cut back on export, and a tied head has no lm_head.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

bool is_hf_decoder(const std::string& architecture);
// The model section a config.json describes (InputError naming the file and key for anything
// the model cannot represent exactly). seq_length: the context, capped at 4096 (a recipe sets
// its own).
config::ModelConfig decoder_model_from_hf(const hf::ConfigJson& config,
                                          const std::string& architecture);
// The HF architecture a decoder model section exports to by default.
std::string decoder_architecture_for(const config::ModelConfig& model);
// config.json for the model: `original` (the imported config.json, or empty) with every key
// the model determines replaced; torch_dtype = `dtype` (a safetensors name).
nlohmann::ordered_json decoder_hf_config(const config::ModelConfig& model,
                                         const std::string& architecture, const std::string& dtype,
                                         const nlohmann::json& original);
std::vector<hf::TensorMapping> decoder_mappings(const std::string& architecture,
                                                const config::ModelConfig& model,
                                                int64_t padded_vocab);
// HF tensors that are buffers, not parameters (GPT-2's causal masks, old rotary tables).
std::set<std::string> decoder_ignored_tensors(const std::string& architecture,
                                              const config::ModelConfig& model);

}  // namespace megatron::models
