#pragma once
// Hugging Face GptOssForCausalLM (gpt-oss-20b / 120b) <-> GPTModel: LLaMA-style blocks with
// q/k/v/o biases, a learned attention sink per head (self_attn.sinks: model.softmax_type
// learnable), sliding-window layers alternating with full ones (layer_types), YaRN rope; every
// MLP routed: a biased router (top-k of the logits, softmax over the picked ones) and experts
// with biases and the clamped quick-GELU unit (swiglu_limit, alpha 1.702, up + 1: activation
// quick_geglu with glu_linear_offset 1). The experts are fused per layer, gate and up
// interleaved along the last dimension of gate_up_proj [E, D, 2F]; the released weights hold
// them as MXFP4 `_blocks` / `_scales` (quantization_config quant_method mxfp4), which import
// dequantizes expert by expert (hf/fused_experts.h). Export writes dense experts.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/fused_experts.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kGptOss = "GptOssForCausalLM";

bool is_hf_gpt_oss(const std::string& architecture);
// Whether a native model section has GPT-OSS's blocks (attention sinks or its gated unit).
bool is_gpt_oss_model(const config::ModelConfig& model);
config::ModelConfig gpt_oss_model_from_hf(const hf::ConfigJson& config);
nlohmann::ordered_json gpt_oss_hf_config(const config::ModelConfig& model, const std::string& dtype,
                                         const nlohmann::json& original);
// Expert tensors appear as slabs `<fused>[e]` (hf/fused_experts.h).
std::vector<hf::TensorMapping> gpt_oss_mappings(const config::ModelConfig& model,
                                                int64_t padded_vocab);
std::vector<hf::FusedExperts> gpt_oss_fused_experts(const config::ModelConfig& model);
std::set<std::string> gpt_oss_ignored_tensors(const config::ModelConfig& model);

}  // namespace megatron::models
