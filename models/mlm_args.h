#pragma once
// Megatron-LM's saved args as a recipe: the model section (Megatron-Core's keys, which the
// recipe's follow), the training, optimizer and schedule keys, and a report naming every arg as
// mapped to a recipe key or ignored.
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/mlm/mlm_checkpoint.h"

namespace megatron::models {

// The model section args describe; InputError naming args.<key> for a setting not imported.
config::ModelConfig model_from_megatron_args(const mlm::MlmArgs& args);
// The training, optimizer and schedule keys a continued run takes from args.
void training_from_megatron_args(const mlm::MlmArgs& args, config::Recipe& recipe);
// Every arg with what became of it: "mapped to model.hidden_size" or "ignored", one per line.
std::string megatron_args_report(const mlm::MlmArgs& args);

}  // namespace megatron::models
