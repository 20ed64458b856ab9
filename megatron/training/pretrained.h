#pragma once
// checkpoint.pretrained (Megatron's --pretrained-checkpoint): the weights a run starts from when
// it has no checkpoint of its own. A native checkpoint directory loads as it is (any saved
// layout: the loader reshards); a Hugging Face directory (config.json + safetensors) is first
// converted by the conversion code (models/hf_checkpoint.h) into a native checkpoint, its
// config.json checked against the run's model section.
#include <filesystem>
#include <ostream>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"

namespace megatron::training {

// True when `dir` is a Hugging Face model directory rather than a native checkpoint.
bool is_hf_directory(const std::string& dir);

// "<temp dir>/<prefix><world rank 0's pid>": one scratch directory name all ranks agree on
// (collective; a single node's temporary directory).
std::filesystem::path agreed_temp_dir(parallel::Communicator& world, const std::string& prefix);

// World rank 0 converts the Hugging Face directory hf_dir into a native checkpoint in out_dir
// (tp = pp = ep = 1: every loader reads any layout) while the others wait (collective). recipe:
// the run whose model section config.json must match (null: the model config.json describes).
void convert_hf_on_rank0(const std::string& hf_dir, const std::string& out_dir,
                         const config::Recipe* recipe, parallel::Communicator& world);

// The native checkpoint directory to load checkpoint.pretrained from. Collective over `world`:
// for a Hugging Face directory world rank 0 converts it into `scratch` (which must not hold a
// checkpoint; the caller removes it after loading) while the others wait. log: rank 0's, or null.
std::string native_pretrained_dir(const config::Recipe& recipe, const std::string& pretrained,
                                  const std::string& scratch, parallel::Communicator& world,
                                  std::ostream* log);

}  // namespace megatron::training
