#include "megatron/training/pretrained.h"

#include <unistd.h>

#include <filesystem>
#include <optional>

#include "megatron/core/error.h"
#include "models/hf_checkpoint.h"

namespace megatron::training {

namespace fs = std::filesystem;

bool is_hf_directory(const std::string& dir) {
  std::error_code ec;
  const fs::path p(dir);
  return fs::is_regular_file(p / "config.json", ec) && !fs::exists(p / "metadata.json", ec) &&
         !fs::exists(p / "latest", ec);
}

std::string native_pretrained_dir(const config::Recipe& recipe, const std::string& pretrained,
                                  const std::string& scratch, parallel::Communicator& world,
                                  std::ostream* log) {
  std::error_code ec;
  MT_INPUT_CHECK(fs::is_directory(pretrained, ec), recipe.source_path, ": checkpoint.pretrained: '",
                 pretrained, "' is not a directory");
  if (!is_hf_directory(pretrained)) return pretrained;
  if (log)
    *log << "checkpoint.pretrained: converting the Hugging Face checkpoint " << pretrained
         << " into " << scratch << "\n"
         << std::flush;
  convert_hf_on_rank0(pretrained, scratch, &recipe, world);
  return scratch;
}

std::filesystem::path agreed_temp_dir(parallel::Communicator& world, const std::string& prefix) {
  int64_t pid = ::getpid();
  Tensor t = Tensor::wrap(&pid, {1}, DType::I64);
  world.broadcast(t, 0);
  return fs::temp_directory_path() / concat(prefix, pid);
}

void convert_hf_on_rank0(const std::string& hf_dir, const std::string& out_dir,
                         const config::Recipe* recipe, parallel::Communicator& world) {
  if (world.rank() == 0) {
    // The base model only: LoRA adapters start fresh and are no part of an HF checkpoint.
    std::optional<config::Recipe> base;
    if (recipe != nullptr) {
      base = *recipe;
      base->peft = config::PeftConfig{};
    }
    models::HfImportOptions o;
    o.hf_dir = hf_dir;
    o.out_dir = out_dir;
    o.recipe_value = base ? &*base : nullptr;
    o.tp = o.pp = o.ep = 1;
    models::import_hf_checkpoint(o);
  }
  world.barrier();
}

}  // namespace megatron::training
