#pragma once
// Hugging Face DeepseekV3ForCausalLM (DeepSeek-V3, Kimi-K2 and the other models of its
// architecture) <-> GPTModel: multi-latent attention (model.multi_latent_attention; its rope
// dimensions interleaved in pairs on the HF side when rope_interleave, reordered here so the
// rotate-half kernels turn them; YaRN's mscale_all_dim folded into model.softmax_scale), the
// first first_k_dense_replace layers dense and the rest routed: sigmoid scores with the
// e_score_correction_bias (the aux-loss-free expert bias, kept with the checkpoint as
// moe/expert_bias/layers.L), the top-k_group of n_group groups by their best two scores,
// renormalized gates times routed_scaling_factor, and n_shared_experts shared experts as one
// shared MLP. Multi-token prediction layers (num_nextn_predict_layers) are not converted yet.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kDeepseekV3 = "DeepseekV3ForCausalLM";

bool is_hf_deepseek(const std::string& architecture);
// The model section (InputError naming the file and key for anything it cannot represent).
config::ModelConfig deepseek_model_from_hf(const hf::ConfigJson& config);
nlohmann::ordered_json deepseek_hf_config(const config::ModelConfig& model,
                                          const std::string& dtype, const nlohmann::json& original);
// hf_config: the HF side's config.json (its rope_interleave; absent: true, DeepSeek-V3's).
std::vector<hf::TensorMapping> deepseek_mappings(const config::ModelConfig& model,
                                                 int64_t padded_vocab,
                                                 const nlohmann::json& hf_config);
std::set<std::string> deepseek_ignored_tensors(const config::ModelConfig& model);

}  // namespace megatron::models
