#pragma once
// The Hugging Face architectures this build converts, in one place: config.json <-> the
// recipe's model section, the tensor maps (models/gpt/hf_decoder.h), and where each native
// parameter lands in a tp x pp x ep layout (found by building the real model on an unallocated
// ParamStore, so a converted checkpoint holds exactly what a training run of that layout saves).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/convert.h"
#include "megatron/hf/fused_experts.h"
#include "megatron/hf/hf_config.h"

namespace megatron::models {

std::vector<std::string> hf_architectures();  // supported names
// The model section of config.json's architecture (InputError naming file and key).
config::ModelConfig model_from_hf_config(const hf::ConfigJson& config);
// The architecture a recipe's model exports to by default.
std::string hf_architecture_for(const config::Recipe& recipe);
// Whether the architecture has BERT's sentence-pair head (recipe data.bert_binary_head).
bool hf_binary_head(const std::string& architecture);
nlohmann::ordered_json hf_config_for(const config::ModelConfig& model,
                                     const std::string& architecture, const std::string& dtype,
                                     const nlohmann::json& original);
// hf_config: the HF side's config.json where the layout of its tensors depends on it (DeepSeek's
// rope_interleave); null: the architecture's default.
std::vector<hf::TensorMapping> hf_mappings(const std::string& architecture,
                                           const config::ModelConfig& model, int64_t padded_vocab,
                                           const nlohmann::json& hf_config = nlohmann::json());
// The tensors of `architecture` that hold every expert of a layer (GPT-OSS's), which the
// mappings name slab by slab (hf/fused_experts.h); empty for the others.
std::vector<hf::FusedExperts> hf_fused_experts(const std::string& architecture,
                                               const config::ModelConfig& model);
// Another name a checkpoint of `architecture` may store the HF tensor `name` under (empty: none).
std::string hf_alternative_name(const std::string& architecture, const std::string& name);
std::set<std::string> hf_ignored_tensors(const std::string& architecture,
                                         const config::ModelConfig& model);

struct NativeLayout {
  std::map<std::string, hf::NativePlacement> placement;  // by parameter name
  std::map<std::string, std::vector<int64_t>> shapes;    // global shape by parameter name
  int64_t padded_vocab = 0;
};
// The recipe's model in a tp x pp x ep layout (parallel.virtual_stages and pipeline_layers from
// the recipe): every parameter with its global shape and (world rank, shard) pieces, ranks
// numbered as the default mesh order places them with dp = ep; and the experts' bias of
// aux-loss-free balancing (moe/expert_bias/layers.L, not a parameter) where the model has it.
NativeLayout native_layout(const config::Recipe& recipe, int64_t tp, int64_t pp, int64_t ep);
// Checks that the mappings produce exactly the layout's parameters with their shapes (Error
// naming the first difference: a converter bug, not bad input).
void check_mappings(const std::vector<hf::TensorMapping>& mappings, const NativeLayout& layout,
                    const std::string& architecture);

}  // namespace megatron::models
