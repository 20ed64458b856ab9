#pragma once
// The mixture-of-experts decoders among the LLaMA-style Hugging Face families (their attention
// is hf_decoder.cpp's): Mixtral (every layer routed; block_sparse_moe.gate and experts.X.w1/w3/w2),
// Qwen2-MoE (Qwen1.5-MoE: a shared expert scaled by a sigmoid gate beside the routed ones, q/k/v
// biases) and Qwen3-MoE (per-head q/k norms, no shared expert); the Qwen ones keep dense MLPs in
// the layers decoder_sparse_step skips and mlp_only_layers lists (model.moe_layer_freq as a
// list). Their softmax routers: norm_topk_prob renormalizes the top-k probabilities (Megatron's
// softmax over the picked logits), without it the top-k of the softmax over all experts is used
// as it is (moe_router_pre_softmax).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

inline constexpr const char* kMixtral = "MixtralForCausalLM";
inline constexpr const char* kQwen2Moe = "Qwen2MoeForCausalLM";
inline constexpr const char* kQwen3Moe = "Qwen3MoeForCausalLM";

bool is_hf_moe_decoder(const std::string& architecture);
// The config.json keys of arch's experts and routing.
std::set<std::string> moe_config_keys(const std::string& architecture);
// model.num_experts and the model.moe_* keys (InputError naming the file and key).
void read_moe_config(const hf::ConfigJson& c, const std::string& architecture,
                     config::ModelConfig& m);
// The architecture an MoE model exports as: Qwen2-MoE with a gated shared expert, Qwen3-MoE with
// per-head q/k norms, else Mixtral.
std::string moe_architecture_for(const config::ModelConfig& m);
// An InputError before anything is written when arch's experts cannot describe the model's.
void check_moe_exportable(const std::string& architecture, const config::ModelConfig& m);
void write_moe_config(const config::ModelConfig& m, const std::string& architecture,
                      nlohmann::ordered_json& j);
// Layer l's MLP: dense (gate/up/down) or the router, experts and shared expert.
void moe_decoder_mlp(std::vector<hf::TensorMapping>& out, const std::string& architecture,
                     const config::ModelConfig& m, int64_t l);

}  // namespace megatron::models
