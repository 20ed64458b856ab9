#pragma once
// What the LLaMA-style Hugging Face decoders (hf_decoder.cpp's families, OLMo-2, Gemma) share:
// in config.json their keys and sizes on import, their dtype and pad token on export; in the
// tensor map the fused QKV from q/k/v_proj, the gated MLP, the embedding and head, and the
// tensors to ignore.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/hf_config.h"
#include "megatron/hf/tensor_map.h"

namespace megatron::models {

// num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads, intermediate_size,
// max_position_embeddings (the recipe's seq_length: that, capped at 4096), vocab_size,
// tie_word_embeddings (default false), initializer_range and head_dim (kv_channels where it
// differs from hidden_size / num_attention_heads, so that other imports keep their recipes).
void read_decoder_sizes(const hf::ConfigJson& c, config::ModelConfig& m);
// The config.json keys every LLaMA-style converter reads: the sizes above, rms_norm_eps,
// hidden_act, tie_word_embeddings and the rope settings.
std::set<std::string> decoder_keys();
// A LLaMA-style model: the sizes above, RMSNorm (rms_norm_eps, else eps), attention_dropout,
// SwiGLU (hidden_act silu, else an error), rope, no biases.
config::ModelConfig llama_style_model(const hf::ConfigJson& c, double eps);
// torch_dtype from a safetensors dtype name (transformers 5's "dtype" dropped), and
// pad_token_id null where it is missing or outside the vocabulary (transformers would take a
// class default that may lie outside a small vocabulary and fail to load).
void write_dtype_and_pad(const config::ModelConfig& m, const std::string& dtype,
                         nlohmann::ordered_json& j);

// vocab_size, hidden_size, intermediate_size (= ffn), num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, max_position_embeddings and rms_norm_eps of config.json.
void write_decoder_sizes(const config::ModelConfig& m, int64_t ffn, nlohmann::ordered_json& j);

// Whether every layer of the model routes its MLP through experts (model.moe_layer_freq).
bool every_layer_routed(const config::ModelConfig& m);

// The first of Gemma's features the model has (the model key that names it), or empty: the
// other architectures refuse to export such a model rather than drop it.
std::string gemma_only_feature(const config::ModelConfig& m);

// Which layers slide (1) or attend fully (0): config.json's layer_types ("sliding_attention" /
// "full_attention", one per layer) where present, else `fallback`.
std::vector<int64_t> read_layer_types(const hf::ConfigJson& c, int64_t layers,
                                      std::vector<int64_t> fallback);
// sliding_window (keys i - W < j <= i) on the sliding layers: model.window_size [W - 1, 0] and
// window_attn_skip_freq listing the full ones; nothing where no layer's window limits anything
// (no sliding_window, or one as long as the context).
void set_layer_windows(const hf::ConfigJson& c, const std::vector<int64_t>& slides,
                       config::ModelConfig& m);

// Native layer prefix `n` ("layers.L."), HF attention prefix `a` ("model.layers.L.self_attn."):
// q_proj / k_proj / v_proj as the fused QKV weight, interleaved per query group.
hf::TensorMapping llama_qkv_weight(const std::string& n, const std::string& a, int64_t D, int64_t H,
                                   int64_t G, int64_t Dh);
// Native MLP prefix `native` ("layers.L.mlp."), HF MLP prefix `p` ("model.layers.L.mlp."):
// gate_proj and up_proj stacked into fc1 [2, F, D], down_proj as fc2 (no biases).
void gated_mlp_weights(std::vector<hf::TensorMapping>& out, const std::string& native,
                       const std::string& p, int64_t D, int64_t F);
// model.embed_tokens (padded rows); model.norm and, untied, lm_head.
hf::TensorMapping embed_tokens_weight(const config::ModelConfig& m, int64_t padded_vocab);
void final_norm_and_head(std::vector<hf::TensorMapping>& out, const config::ModelConfig& m,
                         int64_t padded_vocab);
// The rotary tables older LLaMA-style checkpoints saved, and a tied head saved anyway.
std::set<std::string> llama_style_ignored_tensors(const config::ModelConfig& m);

}  // namespace megatron::models
