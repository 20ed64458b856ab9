#pragma once
// Gemma 3's multimodal checkpoints (Gemma3ForConditionalGeneration: google/gemma-3-4b-it and
// larger) import their language model as Gemma3ForCausalLM: config.json's text_config (its
// missing keys take Gemma3TextConfig's defaults, as transformers does: the released configs
// list few), the tensors under "language_model."; the vision tower and the multimodal projector
// are left out (image inputs are not part of this framework). An export writes the text model.
#include <string>
#include <vector>

#include "megatron/hf/hf_config.h"

namespace megatron::models {

inline constexpr const char* kGemma3Multimodal = "Gemma3ForConditionalGeneration";

// The text model's config.json (architectures Gemma3ForCausalLM), named "<path> text_config" in
// errors; InputError for a top-level key it does not know.
hf::ConfigJson gemma3_text_config(const hf::ConfigJson& multimodal);
inline constexpr const char* kGemma3TextPrefix = "language_model.";
// The multimodal parts an import leaves out, by tensor-name prefix.
std::vector<std::string> gemma3_vision_prefixes();

}  // namespace megatron::models
