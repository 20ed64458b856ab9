#include "megatron/training/pretrained.h"

#include <filesystem>

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
  if (world.rank() == 0) {
    if (log)
      *log << "checkpoint.pretrained: converting the Hugging Face checkpoint " << pretrained
           << " into " << scratch << "\n"
           << std::flush;
    models::HfImportOptions o;
    o.hf_dir = pretrained;
    o.out_dir = scratch;
    o.recipe_value = &recipe;
    o.tp = o.pp = o.ep = 1;  // the loader reshards into the run's layout
    models::import_hf_checkpoint(o);
  }
  world.barrier();
  return scratch;
}

}  // namespace megatron::training
