#pragma once
// The Hugging Face chat_template (Jinja) of each chat template that has one: what an export
// writes into tokenizer_config.json for a model fine-tuned with it, so transformers'
// apply_chat_template renders conversations as the fine-tuning did (llama2, llama3, chatml,
// qwen3, gemma, phi3; simple and plain are this framework's own: empty).
#include <string_view>

#include "data/chat_template.h"

namespace megatron::data {

std::string_view chat_template_jinja(ChatTemplate t);

}  // namespace megatron::data
