// convert_checkpoint: Hugging Face checkpoints in and out.
//   --from-hf HF_DIR --to DIR: a native checkpoint (DIR/iter_0000000) of the model config.json
//     describes, in the layout the recipe or the layout flags name; DIR/recipe.yaml is a
//     fine-tuning recipe for it when no --recipe is given.
//   --from DIR --to-hf HF_DIR: config.json and safetensors (sharded past --max-shard-size) from
//     a native checkpoint of any layout.
// Exit codes: 0 ok, 1 bad input (files, configs, recipes), 2 usage.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "megatron/checkpoint/checkpoint.h"
#include "megatron/checkpoint/file_io.h"
#include "megatron/config/recipe.h"
#include "megatron/hf/convert.h"
#include "megatron/hf/hf_dtype.h"
#include "models/hf_models.h"

namespace {

using namespace megatron;
namespace fs = std::filesystem;

constexpr const char* kUsage = R"(usage:
  convert_checkpoint --from-hf HF_DIR --to DIR [--recipe R [--set key=value ...]]
                     [--tensor-parallel N] [--pipeline-parallel N] [--expert-parallel N]
  convert_checkpoint --from DIR [--iteration N] --to-hf HF_DIR [--dtype fp32|bf16|fp16]
                     [--architecture NAME] [--max-shard-size BYTES|NGB|NMB]

Import (--from-hf): reads HF_DIR/config.json and its safetensors (model.safetensors, or the
shards of model.safetensors.index.json) and writes a native checkpoint DIR/iter_0000000, laid out
as a run with the given tensor/pipeline/expert parallel sizes saves it (any layout loads it
anyway). With --recipe, the recipe's model section must match config.json (an error names the
first difference) and its parallel section gives the layout; without, DIR/recipe.yaml is written:
the model section from config.json, checkpoint.load DIR with finetune: true.
Export (--to-hf): writes HF_DIR (which must not exist or be empty) with config.json and the
weights in --dtype (default: the dtype the checkpoint was imported from, else fp32). The
architecture is the imported one, or chosen from the model (gpt: GPT2LMHeadModel, llama:
LlamaForCausalLM, with experts: MixtralForCausalLM).
Both directions stream tensor by tensor and are exact; output appears only when complete.
Supported architectures: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
MixtralForCausalLM.
)";

struct Args {
  std::string from_hf, to, from, to_hf, recipe, dtype, architecture;
  std::vector<std::string> sets;
  std::optional<int64_t> iteration, tp, pp, ep;
  uint64_t max_shard_bytes = uint64_t{5} << 30;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "convert_checkpoint: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

int64_t positive(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 1) usage_error(flag + " needs a positive integer, got '" + v + "'");
  return n;
}

uint64_t byte_size(const std::string& v) {
  char* end = nullptr;
  const double n = std::strtod(v.c_str(), &end);
  const std::string unit = end;
  double mult = 1;
  if (unit == "GB") mult = 1e9;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GiB") mult = double(1ull << 30);
  else if (unit == "MiB") mult = double(1ull << 20);
  else if (!unit.empty() || v.empty()) usage_error("--max-shard-size: '" + v + "' is not a size");
  if (!(n > 0)) usage_error("--max-shard-size must be positive, got '" + v + "'");
  return static_cast<uint64_t>(n * mult);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(f + " needs a value");
      return argv[++i];
    };
    if (f == "-h" || f == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (f == "--from-hf") a.from_hf = value();
    else if (f == "--to") a.to = value();
    else if (f == "--from") a.from = value();
    else if (f == "--to-hf") a.to_hf = value();
    else if (f == "--recipe") a.recipe = value();
    else if (f == "--set") a.sets.push_back(value());
    else if (f == "--dtype") a.dtype = value();
    else if (f == "--architecture") a.architecture = value();
    else if (f == "--iteration") a.iteration = positive(f, value()) ;
    else if (f == "--tensor-parallel") a.tp = positive(f, value());
    else if (f == "--pipeline-parallel") a.pp = positive(f, value());
    else if (f == "--expert-parallel") a.ep = positive(f, value());
    else if (f == "--max-shard-size") a.max_shard_bytes = byte_size(value());
    else usage_error("unexpected argument '" + f + "'");
  }
  const bool import = !a.from_hf.empty() || !a.to.empty();
  const bool exp = !a.from.empty() || !a.to_hf.empty();
  if (import == exp) usage_error("give either --from-hf HF_DIR --to DIR or --from DIR --to-hf HF_DIR");
  if (import && (a.from_hf.empty() || a.to.empty())) usage_error("--from-hf and --to go together");
  if (exp && (a.from.empty() || a.to_hf.empty())) usage_error("--from and --to-hf go together");
  if (import && (!a.dtype.empty() || !a.architecture.empty() || a.iteration))
    usage_error("--dtype, --architecture and --iteration are export flags");
  if (exp && (!a.recipe.empty() || !a.sets.empty() || a.tp || a.pp || a.ep))
    usage_error("--recipe, --set and the layout flags are import flags");
  if (!a.sets.empty() && a.recipe.empty()) usage_error("--set needs --recipe");
  if (!a.dtype.empty() && hf::dtype_from_flag(a.dtype).empty())
    usage_error("--dtype must be fp32, bf16 or fp16, got '" + a.dtype + "'");
  return a;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// The recipe's model must be the one config.json describes, field by field.
void check_recipe_matches(const config::Recipe& r, const config::ModelConfig& hf,
                          const std::string& config_path) {
  const config::ModelConfig& m = r.model;
  auto same = [&](const char* key, const auto& recipe_value, const auto& hf_value) {
    if (recipe_value == hf_value) return;
    throw InputError(concat(r.source_path, ": model.", key, " is ", recipe_value, " but ",
                            config_path, " describes ", hf_value));
  };
  auto name = [](auto option) { return std::string(config::option_name(option)); };
  same("arch", name(m.arch), name(hf.arch));
  same("num_layers", m.num_layers, hf.num_layers);
  same("hidden_size", m.hidden_size, hf.hidden_size);
  same("num_attention_heads", m.num_attention_heads, hf.num_attention_heads);
  same("num_query_groups", m.query_groups(), hf.query_groups());
  same("ffn_hidden_size", m.ffn(), hf.ffn());
  same("normalization", name(m.normalization), name(hf.normalization));
  same("activation", name(m.activation), name(hf.activation));
  same("position_embedding", name(m.position_embedding), name(hf.position_embedding));
  if (hf.position_embedding == config::PositionEmbedding::Rope)
    same("rope_theta", m.rope_theta, hf.rope_theta);
  else
    same("max_position_embeddings", m.max_positions(), hf.max_positions());
  same("tie_embeddings", m.tie_embeddings, hf.tie_embeddings);
  same("add_bias", m.add_bias, hf.add_bias);
  same("layernorm_epsilon", m.layernorm_epsilon, hf.layernorm_epsilon);
  same("vocab_size", m.vocab_size, hf.vocab_size);
  same("num_experts", m.moe.num_experts, hf.moe.num_experts);
  if (hf.moe.enabled()) {
    same("moe_router_topk", m.moe.moe_router_topk, hf.moe.moe_router_topk);
    same("moe_ffn_hidden_size", m.moe.expert_ffn(m.ffn()), hf.moe.expert_ffn(hf.ffn()));
    same("moe_shared_expert_intermediate_size", m.moe.moe_shared_expert_intermediate_size,
         hf.moe.moe_shared_expert_intermediate_size);
    same("moe_router_pre_softmax", m.moe.moe_router_pre_softmax, hf.moe.moe_router_pre_softmax);
    same("moe_router_score_function", name(m.moe.moe_router_score_function),
         name(hf.moe.moe_router_score_function));
    same("moe_router_num_groups", m.moe.moe_router_num_groups, hf.moe.moe_router_num_groups);
    same("moe_layer_freq", m.moe.moe_layer_freq == hf.moe.moe_layer_freq, true);
    same("moe_router_topk_scaling_factor", m.moe.moe_router_topk_scaling_factor.has_value(),
         false);
  }
}

config::Recipe recipe_for_import(const Args& a, const config::ModelConfig& model,
                                 const std::string& dir, std::string& yaml_out) {
  if (!a.recipe.empty()) {
    config::Recipe r = config::load_recipe(a.recipe, a.sets);
    check_recipe_matches(r, model, (fs::path(a.from_hf) / "config.json").string());
    return r;
  }
  config::Recipe r;
  r.model = model;
  r.parallel.tensor = a.tp.value_or(1);
  r.parallel.pipeline = a.pp.value_or(1);
  r.parallel.expert = a.ep.value_or(1);
  r.training.micro_batch_size = 1;
  r.training.global_batch_size = 8;
  r.training.train_iters = 100;
  r.optimizer.lr = 1e-5;
  r.data.mock = true;
  // Until the HF directory's own tokenizer loads: NullTokenizer of the model's vocabulary.
  r.data.tokenizer.type = "NullTokenizer";
  r.data.tokenizer.vocab_size = model.vocab_size;
  r.checkpoint.load = fs::absolute(dir).lexically_normal().string();
  r.checkpoint.finetune = true;
  yaml_out = concat("# Written by convert_checkpoint from ", fs::absolute(a.from_hf).string(),
                    "/config.json.\n# The model section is the converted checkpoint's; choose "
                    "data, training and optimizer\n# for the fine-tuning run (data.mock trains on "
                    "synthetic tokens).\n",
                    r.to_yaml());
  return config::parse_recipe_string(yaml_out, (fs::path(dir) / "recipe.yaml").string());
}

int import_hf(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string config_path = (fs::path(a.from_hf) / "config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(config_path, ec))
    throw InputError(concat("Hugging Face directory ", a.from_hf, " has no config.json"));
  const hf::ConfigJson cfg = hf::ConfigJson::load(config_path);
  const config::ModelConfig model = models::model_from_hf_config(cfg);
  const std::string arch = cfg.architecture();
  const hf::HfTensors tensors(a.from_hf);
  if (fs::exists(fs::path(a.to) / "latest", ec) || fs::exists(fs::path(a.to) / "iter_0000000", ec))
    throw InputError(concat("--to ", a.to, " already holds a checkpoint (nothing is overwritten)"));
  std::string yaml;
  const config::Recipe recipe = recipe_for_import(a, model, a.to, yaml);
  const int64_t tp = a.tp.value_or(recipe.parallel.tensor),
                pp = a.pp.value_or(recipe.parallel.pipeline),
                ep = a.ep.value_or(recipe.parallel.expert);
  config::Recipe layout_recipe = recipe;
  layout_recipe.parallel.tensor = tp, layout_recipe.parallel.pipeline = pp;
  layout_recipe.parallel.expert = ep;
  layout_recipe.validate();
  const models::NativeLayout layout = models::native_layout(layout_recipe, tp, pp, ep);
  hf::ImportRequest req;
  req.mappings = models::hf_mappings(arch, model, layout.padded_vocab);
  models::check_mappings(req.mappings, layout, arch);
  req.layout = layout.placement;
  req.ignored = models::hf_ignored_tensors(arch, model);
  req.out_dir = a.to;
  req.iteration = 0;
  req.metadata = {
      {"iteration", 0},
      {"consumed_samples", 0},
      {"model", {{"vocab_size", model.vocab_size}, {"padded_vocab_size", layout.padded_vocab}}},
      {"layout", {{"tp", tp}, {"pp", pp}, {"dp", ep}, {"ep", ep}, {"distributed_optimizer", false}}},
      {"recipe", layout_recipe.to_json()},
      {"hf",
       {{"architecture", arch},
        {"dtype", tensors.common_dtype()},
        {"source", fs::absolute(a.from_hf).lexically_normal().string()},
        {"config", cfg.json()}}}};
  hf::import_to_native(tensors, req);
  if (!yaml.empty())
    checkpoint::io::write_file_atomic((fs::path(a.to) / "recipe.yaml").string(), yaml, ".tmp");
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("imported %s (%s, %zu tensors) into %s/iter_0000000 (tp %lld, pp %lld, ep %lld)\n",
              a.from_hf.c_str(), arch.c_str(), req.mappings.size(), a.to.c_str(),
              static_cast<long long>(tp), static_cast<long long>(pp),
              static_cast<long long>(ep));
  if (!yaml.empty()) std::printf("recipe: %s/recipe.yaml\n", a.to.c_str());
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

int export_hf(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  checkpoint::Reader reader(a.from, a.iteration);
  const auto& meta = reader.index().metadata;
  const std::string meta_path = reader.index().path + "/metadata.json";
  if (!meta.contains("recipe") || !meta["recipe"].is_object())
    throw InputError(concat(meta_path, ": no recipe in the metadata"));
  config::Recipe recipe = config::parse_recipe_string(meta["recipe"].dump(), meta_path);
  config::ModelConfig model = recipe.model;
  if (meta.contains("model") && meta["model"].contains("vocab_size") &&
      meta["model"]["vocab_size"].is_number_integer())
    model.vocab_size = meta["model"]["vocab_size"].get<int64_t>();
  if (model.vocab_size <= 0)
    throw InputError(concat(meta_path, ": the model's vocabulary size is not recorded"));
  const nlohmann::json hf_meta = meta.contains("hf") ? meta["hf"] : nlohmann::json::object();
  std::string arch = a.architecture;
  if (arch.empty() && hf_meta.contains("architecture") && hf_meta["architecture"].is_string())
    arch = hf_meta["architecture"].get<std::string>();
  if (arch.empty()) arch = models::hf_architecture_for(model);
  const auto supported = models::hf_architectures();
  if (std::find(supported.begin(), supported.end(), arch) == supported.end())
    usage_error("--architecture '" + arch + "' is not supported");
  std::string dtype = hf::dtype_from_flag(a.dtype);
  if (dtype.empty() && hf_meta.contains("dtype") && hf_meta["dtype"].is_string())
    dtype = hf_meta["dtype"].get<std::string>();
  if (!hf::float_dtype(dtype)) dtype = "F32";
  const auto& tensors = reader.index().tensors;
  const auto embed = tensors.find("model/embedding.word_embeddings.weight");
  if (embed == tensors.end() || embed->second.shape.empty())
    throw InputError(concat(meta_path, ": no model/embedding.word_embeddings.weight"));
  hf::ExportRequest req;
  req.mappings = models::hf_mappings(arch, model, embed->second.shape[0]);
  req.dtype = dtype;
  req.max_shard_bytes = a.max_shard_bytes;
  const nlohmann::json original = hf_meta.contains("config") ? hf_meta["config"] : nlohmann::json();
  req.files["config.json"] = models::hf_config_for(model, arch, dtype, original).dump(2) + "\n";
  hf::export_to_hf(reader, req, a.to_hf);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exported %s (iteration %lld) to %s as %s, %s\n", reader.index().path.c_str(),
              static_cast<long long>(reader.index().iteration), a.to_hf.c_str(), arch.c_str(),
              hf::torch_name(dtype).c_str());
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    return a.from_hf.empty() ? export_hf(a) : import_hf(a);
  } catch (const megatron::InputError& e) {
    std::fprintf(stderr, "convert_checkpoint: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
