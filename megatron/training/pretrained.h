#pragma once
// checkpoint.pretrained (Megatron's --pretrained-checkpoint): the weights a run starts from when
// it has no checkpoint of its own. A native checkpoint directory loads as it is (any saved
// layout: the loader reshards); a Hugging Face directory (config.json + safetensors) is first
// converted by the conversion code (models/hf_checkpoint.h) into a native checkpoint, its
// config.json checked against the run's model section.
#include <ostream>
#include <string>

#include "megatron/config/recipe.h"
#include "megatron/parallel/communicator.h"

namespace megatron::training {

// True when `dir` is a Hugging Face model directory rather than a native checkpoint.
bool is_hf_directory(const std::string& dir);

// The native checkpoint directory to load checkpoint.pretrained from. Collective over `world`:
// for a Hugging Face directory world rank 0 converts it into `scratch` (which must not hold a
// checkpoint; the caller removes it after loading) while the others wait. log: rank 0's, or null.
std::string native_pretrained_dir(const config::Recipe& recipe, const std::string& pretrained,
                                  const std::string& scratch, parallel::Communicator& world,
                                  std::ostream* log);

}  // namespace megatron::training
