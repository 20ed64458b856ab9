#pragma once
// Hugging Face checkpoints in and out of native checkpoints (what tools/convert_checkpoint runs):
// config.json <-> recipe, the architecture's tensor map, the target layout, and the streaming
// engine of megatron/hf/convert.h.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/config/recipe.h"

namespace megatron::models {

struct HfImportOptions {
  std::string hf_dir, out_dir;
  // A recipe whose model section must match config.json (its parallel section gives the
  // layout); empty: a recipe is made from config.json and written to out_dir/recipe.yaml.
  std::string recipe;
  std::vector<std::string> overrides;
  // A loaded recipe used like `recipe` (a run converting its checkpoint.pretrained); wins over it.
  const config::Recipe* recipe_value = nullptr;
  std::optional<int64_t> tp, pp, ep;  // override the recipe's layout
};
struct HfImportResult {
  std::string architecture;
  size_t tensors = 0;
  int64_t tp = 1, pp = 1, ep = 1;
  std::string recipe_path;  // the written recipe.yaml, or empty
  // What the checkpoint holds that the import leaves out (said to the user): a multimodal
  // model's vision parts, DeepSeek's multi-token-prediction layers.
  std::vector<std::string> left_out;
};
// InputError naming the file, key or tensor on bad input; out_dir gets iter_0000000 and
// `latest` only when complete, and an existing checkpoint there is never overwritten.
HfImportResult import_hf_checkpoint(const HfImportOptions& options);

struct HfExportOptions {
  std::string native_dir;
  std::optional<int64_t> iteration;
  std::string hf_dir;
  std::string dtype;         // safetensors name; empty: the imported dtype, else F32
  std::string architecture;  // empty: the imported one, else chosen from the model
  uint64_t max_shard_bytes = uint64_t{5} << 30;
  // A LoRA checkpoint's adapters merged into the weights (false: the frozen base alone, the base
  // model of a PEFT adapter export, models/hf_peft.h).
  bool merge_lora = true;
};
struct HfExportResult {
  std::string checkpoint_path, architecture, dtype;
  int64_t iteration = 0;
};
HfExportResult export_hf_checkpoint(const HfExportOptions& options);

// The recipe a native checkpoint was saved with (its metadata), model.vocab_size set to the
// recorded vocabulary. InputError naming metadata.json when absent.
config::Recipe recipe_of_checkpoint(const checkpoint::CheckpointIndex& index);
// The model section of `recipe` must describe the model config_path describes (InputError
// naming the recipe key and both values otherwise).
void check_recipe_matches(const config::Recipe& recipe, const config::ModelConfig& hf_model,
                          const std::string& config_path);

}  // namespace megatron::models
