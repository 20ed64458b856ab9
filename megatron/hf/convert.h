#pragma once
// The conversion engine: Hugging Face tensors -> a native checkpoint in any layout, and a native
// checkpoint of any layout -> Hugging Face tensors, one tensor at a time (memory stays near
// two or three copies of the largest tensor, never the whole model). What each architecture's
// tensors are and how they map is the models' business (models/*/hf_*.h); this file only moves
// the bytes. Both directions are exact: fp32 holds F32/BF16/F16 values exactly and the
// mappings only move elements.
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/hf/fused_experts.h"
#include "megatron/hf/hf_directory.h"
#include "megatron/hf/tensor_map.h"
#include "megatron/params/parameter.h"

namespace megatron::hf {

// Where one native tensor's pieces go in the target layout: (rank, shard) as a training run of
// that layout saves them. Replicated pieces are written once, by the first rank listed.
struct NativePlacement {
  std::vector<std::pair<int, ShardSpec>> pieces;
};

struct ImportRequest {
  // Every native parameter (checkpoint key model/<native>), and non-parameter tensors kept with
  // the checkpoint under moe/ (the experts' bias) or optim/ (Adam's moments of a parameter,
  // optim/exp_avg/<parameter>), whose names are their keys.
  std::vector<TensorMapping> mappings;
  std::map<std::string, NativePlacement> layout;  // by native name; absent: whole on rank 0
  std::set<std::string> ignored;                  // HF tensors that are not parameters
  std::vector<std::string> ignored_prefixes;      // and those whose names start so
  std::string out_dir;                            // the checkpoint root
  // What describes the model, in the error about a tensor it has no use for.
  std::string model_description = "config.json describes";
  int64_t iteration = 0;
  nlohmann::json metadata = nlohmann::json::object();
};

// Checks the source tensors (a Hugging Face directory, a Megatron-LM checkpoint) against the
// mappings (every source present with its shape, no tensor left over) before anything is written,
// then writes DIR/iter_NNNNNNN with checkpoint.h's commit protocol (atomic: DIR/latest names it
// only when complete). InputError naming the file and tensor on bad input.
void import_to_native(const TensorSource& source, const ImportRequest& request);

struct ExportRequest {
  std::vector<TensorMapping> mappings;  // every HF tensor comes from one of these
  std::string dtype = "F32";            // of every HF tensor
  uint64_t max_shard_bytes = uint64_t{5} << 30;
  std::map<std::string, std::string> files;  // config.json, ... written beside the weights
  // Native model tensors the mappings may leave out (e.g. a tied output layer's copy).
  std::set<std::string> ignored;
  // LoRA (megatron/transformer/lora.h): a mapped weight W with adapters X.lora_a / X.lora_b in
  // the checkpoint is exported merged, W + lora_scale * B A (lora_scale = alpha / rank).
  float lora_scale = 0.0f;
  // Export the weights without their adapters instead (the base of a PEFT adapter).
  bool drop_lora = false;
  // Tensors the mappings fill slab by slab (`<fused>[e]`, hf/fused_experts.h): written whole.
  std::vector<FusedExperts> fused;
};

// Reads each mapped tensor whole from the native checkpoint (any layout) and writes the HF
// directory `out_dir` atomically (HfWriter). A native model tensor no mapping uses is an error
// naming it (the architecture has a part the HF format cannot hold).
void export_to_hf(checkpoint::Reader& native, const ExportRequest& request,
                  const std::string& out_dir);

}  // namespace megatron::hf
