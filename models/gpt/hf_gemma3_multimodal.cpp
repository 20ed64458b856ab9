#include "models/gpt/hf_gemma3_multimodal.h"

#include "models/gpt/hf_gemma.h"

namespace megatron::models {

hf::ConfigJson gemma3_text_config(const hf::ConfigJson& c) {
  c.check_known(
      {"text_config", "vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index",
       "image_token_index", "tie_word_embeddings", "initializer_range"},
      kGemma3Multimodal);
  if (!c.json().contains("text_config") || !c.json()["text_config"].is_object())
    c.fail("text_config", "must be an object (the language model's configuration)");
  nlohmann::json t = c.json()["text_config"];
  // Gemma3TextConfig's defaults (transformers 5.24), for the keys a released config leaves out.
  const nlohmann::json defaults = {{"vocab_size", 262208},
                                   {"hidden_size", 2304},
                                   {"intermediate_size", 9216},
                                   {"num_hidden_layers", 26},
                                   {"num_attention_heads", 8},
                                   {"num_key_value_heads", 4},
                                   {"head_dim", 256},
                                   {"hidden_activation", "gelu_pytorch_tanh"},
                                   {"max_position_embeddings", 131072},
                                   {"rms_norm_eps", 1e-6},
                                   {"query_pre_attn_scalar", 256},
                                   {"sliding_window", 4096},
                                   {"rope_local_base_freq", 10000.0}};
  for (const auto& [key, value] : defaults.items())
    if (!t.contains(key)) t[key] = value;
  // (rope_local_base_freq is transformers 4's spelling, beside rope_parameters it is not used)
  if (t.contains("rope_parameters")) t.erase("rope_local_base_freq");
  if (!t.contains("tie_word_embeddings"))
    t["tie_word_embeddings"] = c.json().value("tie_word_embeddings", true);
  t["architectures"] = {kGemma3};
  return hf::ConfigJson(t, c.path() + " text_config");
}

std::vector<std::string> gemma3_vision_prefixes() {
  return {"vision_tower.", "multi_modal_projector."};
}

}  // namespace megatron::models
