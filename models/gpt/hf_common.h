#pragma once
// What the LLaMA-style Hugging Face decoders (hf_decoder.cpp's families, OLMo-2, Gemma) share
// in config.json: their sizes on import, their dtype and pad token on export.
#include <nlohmann/json.hpp>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"

namespace megatron::models {

// num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, intermediate_size,
// max_position_embeddings (the recipe's seq_length: that, capped at 4096), vocab_size,
// tie_word_embeddings (default false), initializer_range and head_dim (kv_channels where it
// differs from hidden_size / num_attention_heads, so that other imports keep their recipes).
void read_decoder_sizes(const hf::ConfigJson& c, config::ModelConfig& m);
// torch_dtype from a safetensors dtype name (transformers 5's "dtype" dropped), and
// pad_token_id null where it is missing or outside the vocabulary (transformers would take a
// class default that may lie outside a small vocabulary and fail to load).
void write_dtype_and_pad(const config::ModelConfig& m, const std::string& dtype,
                         nlohmann::ordered_json& j);

// The first of Gemma's features the model has (the model key that names it), or empty: the
// other architectures refuse to export such a model rather than drop it.
std::string gemma_only_feature(const config::ModelConfig& m);

}  // namespace megatron::models
