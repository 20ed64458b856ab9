#pragma once
// Hugging Face BERT <-> BertModel: BertForPreTraining (masked-LM and next-sentence heads, the
// pooler) and BertForMaskedLM (masked-LM head only). config.json <-> the model section
// ("gelu" is the exact GELU, model.activation gelu_exact), separate query/key/value fused per
// head into the QKV weight, the post-LN block's two LayerNorms, the MLM transform and the
// decoder bias (padded like the vocabulary); the decoder weight is the tied word embedding.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

bool is_hf_bert(const std::string& architecture);
// Whether the architecture has the sentence-pair head (the recipe's data.bert_binary_head).
bool hf_bert_binary_head(const std::string& architecture);
config::ModelConfig bert_model_from_hf(const hf::ConfigJson& config,
                                       const std::string& architecture);
std::string bert_architecture_for(bool binary_head);
nlohmann::ordered_json bert_hf_config(const config::ModelConfig& model,
                                      const std::string& architecture, const std::string& dtype,
                                      const nlohmann::json& original);
std::vector<hf::TensorMapping> bert_mappings(const std::string& architecture,
                                             const config::ModelConfig& model,
                                             int64_t padded_vocab);
std::set<std::string> bert_ignored_tensors(const std::string& architecture,
                                           const config::ModelConfig& model);

}  // namespace megatron::models
