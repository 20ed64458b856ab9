#pragma once
// Megatron-LM checkpoints into native ones (tools/convert_checkpoint --from-megatron): the
// saved args become a recipe (every arg either mapped to a recipe key or named as ignored in
// megatron_args.txt beside it), the model tensors (megatron/mlm) map onto the native parameters
// of any tp x pp layout, and the streaming engine (megatron/hf/convert.h) writes them.
// GPT-family models (GPT, LLaMA-style: RMSNorm, SwiGLU, grouped-query attention, rope, q/k norms,
// biases or not, tied or untied embeddings; Mixtral-style routed experts) in either format and
// any saved layout; with the distributed optimizer's state (fp32 runs of dense models) so that
// the run continues here.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megatron/config/recipe.h"
#include "megatron/hf/tensor_map.h"
#include "megatron/mlm/mlm_checkpoint.h"
#include "models/mlm_args.h"

namespace megatron::models {

// Native parameters from the canonical Megatron-Core names of mlm::MlmTensors. padded_vocab:
// the native embedding rows (>= the saved padded vocabulary, model.vocab_size).
std::vector<hf::TensorMapping> megatron_mappings(const config::ModelConfig& model,
                                                 int64_t padded_vocab);

struct MegatronImportOptions {
  std::string megatron_dir, out_dir;
  std::optional<int64_t> iteration;   // default: the tracker file's
  std::optional<int64_t> tp, pp, ep;  // the target layout (default 1)
  std::string recipe;                 // a recipe whose model must match args (its layout used)
  // The weights alone, leaving out the optimizer's state the checkpoint may hold.
  bool weights_only = false;
  std::vector<std::string> overrides;
};
struct MegatronImportResult {
  std::string format, source_dir;
  int64_t iteration = 0, consumed_samples = 0;
  int64_t source_tp = 1, source_pp = 1, source_ep = 1, tp = 1, pp = 1, ep = 1;
  size_t tensors = 0;
  // The distributed optimizer's state came along (Adam's moments and step count): the
  // recipe resumes the run (checkpoint.load) instead of fine-tuning from the weights.
  bool optimizer_state = false;
  std::string optimizer_sharding;
  int64_t optimizer_steps = 0;
  std::string recipe_path, args_report_path;
};
// InputError naming the file, arg or tensor on bad input; out_dir gets iter_NNNNNNN (the
// Megatron iteration) and `latest` only when complete; an existing checkpoint is never
// overwritten.
MegatronImportResult import_megatron_checkpoint(const MegatronImportOptions& options);

}  // namespace megatron::models
