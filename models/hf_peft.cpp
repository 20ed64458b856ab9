#include "models/hf_peft.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/core/error.h"
#include "megatron/hf/hf_directory.h"
#include "models/hf_checkpoint.h"
#include "models/hf_models.h"

namespace megatron::models {

namespace {

constexpr const char* kModel = "model/";
constexpr const char* kPrefix = "base_model.model.";

std::string strip_weight(const std::string& name) {
  const std::string suffix = ".weight";
  MT_CHECK(name.size() > suffix.size() &&
               name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0,
           "not a weight name: ", name);
  return name.substr(0, name.size() - suffix.size());
}

// "model.layers.0.self_attn.q_proj.weight" -> "q_proj"
std::string module_of(const std::string& hf_weight) {
  const std::string base = strip_weight(hf_weight);
  return base.substr(base.rfind('.') + 1);
}

}  // namespace

namespace {

// What an adapter export writes, decided from the checkpoint alone (nothing written yet).
struct PeftPlan {
  config::Recipe recipe;
  PeftExportResult result;
  std::vector<hf::TensorMapping> mappings;
  struct Adapter {
    size_t mapping;  // into mappings
    std::vector<int64_t> b_shape;
  };
  std::vector<Adapter> adapters;
  std::vector<hf::OutTensor> out;
};

PeftPlan plan_peft_export(const PeftExportOptions& o, checkpoint::Reader& reader) {
  const auto& index = reader.index();
  PeftPlan plan;
  plan.recipe = recipe_of_checkpoint(index);
  const config::Recipe& recipe = plan.recipe;
  MT_INPUT_CHECK(recipe.peft.lora(), index.path,
                 ": not a LoRA checkpoint (its recipe has no peft: lora section)");
  PeftExportResult& result = plan.result;
  result.checkpoint_path = index.path;
  result.rank = recipe.peft.dim;
  result.alpha = recipe.peft.alpha;
  const auto& meta = index.metadata;
  result.architecture = o.architecture;
  if (result.architecture.empty() && meta.contains("hf") && meta["hf"].contains("architecture"))
    result.architecture = meta["hf"]["architecture"].get<std::string>();
  if (result.architecture.empty()) result.architecture = hf_architecture_for(recipe);
  const auto embed = index.tensors.find("model/embedding.word_embeddings.weight");
  MT_INPUT_CHECK(embed != index.tensors.end(), index.path, ": no word embeddings");
  plan.mappings = hf_mappings(result.architecture, recipe.model, embed->second.shape[0]);
  std::set<std::string> modules;
  for (size_t k = 0; k < plan.mappings.size(); ++k) {
    const hf::TensorMapping& m = plan.mappings[k];
    if (m.native.size() < 7 || m.native.compare(m.native.size() - 7, 7, ".weight") != 0) continue;
    const std::string base = strip_weight(m.native);
    const auto a = index.tensors.find(kModel + base + ".lora_a.weight");
    const auto b = index.tensors.find(kModel + base + ".lora_b.weight");
    if (a == index.tensors.end() || b == index.tensors.end()) continue;
    for (const hf::HfSource& s : m.sources) {
      MT_INPUT_CHECK(!s.transposed, "PEFT export of ", result.architecture, "'s ", s.name,
                     " (stored transposed, a Conv1D) is not implemented");
      const int64_t out_rows = s.shape.empty() ? 0 : s.shape[0];
      const std::string name = kPrefix + strip_weight(s.name);
      plan.out.push_back({name + ".lora_A.weight", a->second.shape, "F32"});
      plan.out.push_back({name + ".lora_B.weight", {out_rows, result.rank}, "F32"});
      modules.insert(module_of(s.name));
    }
    plan.adapters.push_back({k, b->second.shape});
  }
  MT_INPUT_CHECK(!plan.adapters.empty(), index.path, ": no LoRA adapter tensors for ",
                 result.architecture, "'s weights");
  result.target_modules.assign(modules.begin(), modules.end());
  result.tensors = plan.out.size();
  return plan;
}

}  // namespace

void check_peft_export(const PeftExportOptions& o) {
  checkpoint::Reader reader(o.native_dir, o.iteration);
  (void)plan_peft_export(o, reader);
  std::error_code ec;
  MT_INPUT_CHECK(
      !std::filesystem::exists(o.out_dir, ec) || (std::filesystem::is_directory(o.out_dir, ec) &&
                                                  std::filesystem::is_empty(o.out_dir, ec)),
      "adapter output directory ", o.out_dir,
      " already exists and is not empty (nothing is overwritten)");
}

PeftExportResult export_peft_adapter(const PeftExportOptions& o) {
  checkpoint::Reader reader(o.native_dir, o.iteration);
  PeftPlan plan = plan_peft_export(o, reader);
  const config::Recipe& recipe = plan.recipe;
  PeftExportResult& result = plan.result;
  hf::HfWriter writer(o.out_dir, plan.out, uint64_t{1} << 62, "adapter_model.safetensors");
  for (const PeftPlan::Adapter& ad : plan.adapters) {
    const hf::TensorMapping& w = plan.mappings[ad.mapping];
    const std::string base = strip_weight(w.native);
    const auto a = reader.read_whole(kModel + base + ".lora_a.weight");
    const auto b = reader.read_whole(kModel + base + ".lora_b.weight");
    // B's rows are laid out like the weight's: the weight's row blocks at width r cut them.
    hf::TensorMapping bm = w;
    bm.native = base + ".lora_b.weight";
    bm.native_shape = ad.b_shape;
    for (hf::HfSource& s : bm.sources) s.shape = {s.shape.empty() ? 0 : s.shape[0], result.rank};
    const auto parts = bm.export_sources(b);
    for (size_t s = 0; s < w.sources.size(); ++s) {
      const std::string name = kPrefix + strip_weight(w.sources[s].name);
      writer.write(name + ".lora_A.weight", a.data());
      writer.write(name + ".lora_B.weight", parts[s].data());
    }
  }
  const nlohmann::ordered_json config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", o.base_model.empty() ? nullptr : nlohmann::json(o.base_model)},
      {"r", result.rank},
      {"lora_alpha", result.alpha},
      {"lora_dropout", recipe.peft.dropout},
      {"target_modules", result.target_modules},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"use_rslora", false},
      {"init_lora_weights", true}};
  writer.add_file("adapter_config.json", config.dump(2) + "\n");
  writer.commit();
  return result;
}

}  // namespace megatron::models
