#pragma once
// Native checkpoints out to Megatron-LM (tools/convert_checkpoint --to-megatron): the model's
// parameters through the import's name map run backwards (megatron_mappings), Megatron-LM's
// args made from the recipe, written by megatron/mlm/mlm_writer.h in torch_dist or the legacy
// torch format. Weights only: Megatron-LM loads it with --no-load-optim --no-load-rng (or
// --finetune). Dense GPT-family models, as the import.
#include <cstdint>
#include <optional>
#include <string>

#include "megatron/checkpoint/pickle_writer.h"
#include "megatron/config/recipe.h"
#include "megatron/mlm/mlm_writer.h"

namespace megatron::models {

struct MegatronExportOptions {
  std::string native_dir, out_dir;
  std::optional<int64_t> iteration;
  mlm::Format format = mlm::Format::TorchDist;
  int64_t tp = 1, pp = 1;  // torch: the rank files' layout
  mlm::LayerSpec spec = mlm::LayerSpec::TransformerEngine;
  std::string dtype;  // "F32", "BF16", "F16"; empty: the checkpoint's recipe precision's
};
struct MegatronExportResult {
  std::string checkpoint_path, dtype;
  int64_t iteration = 0, padded_vocab = 0;
  size_t tensors = 0;
};
MegatronExportResult export_megatron_checkpoint(const MegatronExportOptions& options);

// Megatron-LM's args (an argparse.Namespace) for a recipe's model, training and optimizer.
checkpoint::Py megatron_args_for(const config::Recipe& recipe, int64_t padded_vocab,
                                 int64_t iteration, int64_t consumed_samples, int64_t tp,
                                 int64_t pp, mlm::Format format);

}  // namespace megatron::models
