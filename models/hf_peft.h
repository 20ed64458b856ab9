#pragma once
// A LoRA run's adapters as a Hugging Face PEFT adapter directory (what peft's
// PeftModel.from_pretrained loads over the base model): adapter_config.json (peft_type LORA,
// r, lora_alpha, target_modules, ...) and adapter_model.safetensors with
// "base_model.model.<HF weight name without .weight>.lora_A.weight" [r, in] and ".lora_B.weight"
// [out, r]. Our fused projections map onto the HF ones exactly: qkv's single A serves q_proj,
// k_proj and v_proj and its B is cut into their rows like the fused weight (per query group);
// SwiGLU fc1's A serves gate_proj and up_proj, its [2, F, r] B splits into theirs. The base model
// is the checkpoint exported with convert_checkpoint --to-hf --no-merge-lora.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megatron::models {

struct PeftExportOptions {
  std::string native_dir;
  std::optional<int64_t> iteration;
  std::string out_dir;       // must not exist or be empty
  std::string architecture;  // empty: the imported one, else chosen from the model
  std::string base_model;    // adapter_config.json's base_model_name_or_path (may be empty)
};

struct PeftExportResult {
  std::string checkpoint_path, architecture;
  int64_t rank = 0;
  double alpha = 0;
  std::vector<std::string> target_modules;  // HF module names, e.g. q_proj
  size_t tensors = 0;
};

// InputError when the checkpoint has no LoRA adapters or the architecture's weights are not
// row-major [out, in] HF tensors (GPT-2's Conv1D).
PeftExportResult export_peft_adapter(const PeftExportOptions& options);
// The same checks, and that out_dir is new or empty, writing nothing: run before a base export
// so that a refused adapter leaves no half-done output behind.
void check_peft_export(const PeftExportOptions& options);

}  // namespace megatron::models
