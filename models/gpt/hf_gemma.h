#pragma once
// Hugging Face Gemma2ForCausalLM and Gemma3ForCausalLM (Gemma 3's text model) <-> GPTModel: a
// LLaMA-style decoder with RMSNorms that scale by 1 + w (model.layernorm_zero_centered_gamma)
// in a sandwich around each sub-layer (input_layernorm / post_attention_layernorm and
// pre_feedforward_layernorm / post_feedforward_layernorm: sublayer_input_norm and
// sublayer_output_norm), embeddings scaled by sqrt(hidden) (scale_embeddings_by_sqrt_hidden),
// query_pre_attn_scalar^-1/2 as the softmax scale (model.softmax_scale), a GELU-tanh gated MLP
// (activation geglu), tied embeddings, sliding and full attention layers by layer_types;
// Gemma 2 soft-caps attention scores and logits (attn_logit_softcapping,
// final_logit_softcapping), Gemma 3 has per-head q/k norms (qk_layernorm) and a local rope base
// for its sliding layers (rope_local_base_freq; the global rope, scaled or not, elsewhere).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kGemma2 = "Gemma2ForCausalLM";
inline constexpr const char* kGemma3 = "Gemma3ForCausalLM";

bool is_hf_gemma(const std::string& architecture);
// The Gemma architecture a native model section exports to, or empty when it is not a Gemma
// (1 + w norms in a sandwich).
std::string gemma_architecture_for(const config::ModelConfig& model);
// The model section (InputError naming the file and key for anything it cannot represent).
config::ModelConfig gemma_model_from_hf(const hf::ConfigJson& config,
                                        const std::string& architecture);
nlohmann::ordered_json gemma_hf_config(const config::ModelConfig& model,
                                       const std::string& architecture, const std::string& dtype,
                                       const nlohmann::json& original);
std::vector<hf::TensorMapping> gemma_mappings(const config::ModelConfig& model,
                                              const std::string& architecture,
                                              int64_t padded_vocab);
std::set<std::string> gemma_ignored_tensors(const config::ModelConfig& model);

}  // namespace megatron::models
