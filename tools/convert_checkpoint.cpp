// convert_checkpoint: Hugging Face and Megatron-LM checkpoints in and out.
//   --from-hf HF_DIR --to DIR: a native checkpoint (DIR/iter_0000000) of the model config.json
//     describes, in the layout the recipe or the layout flags name; DIR/recipe.yaml is a
//     fine-tuning recipe for it when no --recipe is given.
//   --from-megatron MEGATRON_DIR --to DIR: a native checkpoint (DIR/iter_NNNNNNN, Megatron's
//     iteration) of a Megatron-LM checkpoint (torch_dist or torch), DIR/recipe.yaml from its args.
//   --from DIR --to-megatron OUT: a Megatron-LM save directory (torch_dist or torch) of a native
//     checkpoint's weights.
//   --from DIR --to-hf HF_DIR: config.json and safetensors (sharded past --max-shard-size) from
//     a native checkpoint of any layout.
// Exit codes: 0 ok, 1 bad input (files, configs, recipes), 2 usage.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "megatron/hf/hf_dtype.h"
#include "models/hf_checkpoint.h"
#include "models/hf_peft.h"
#include "models/mlm_export.h"
#include "models/mlm_import.h"
#include "tools/cli_flags.h"

namespace {

using namespace megatron;

constexpr const char* kUsage = R"(usage:
  convert_checkpoint --from-hf HF_DIR --to DIR [--recipe R [--set key=value ...]]
                     [--tensor-parallel N] [--pipeline-parallel N] [--expert-parallel N]
  convert_checkpoint --from-megatron MEGATRON_DIR [--iteration N] --to DIR
                     [--recipe R [--set key=value ...]] [--tensor-parallel N] [--pipeline-parallel N]
                     [--expert-parallel N] [--weights-only]
  convert_checkpoint --from DIR [--iteration N] --to-megatron OUT [--format torch_dist|torch]
                     [--tensor-parallel N] [--pipeline-parallel N] [--dtype fp32|bf16|fp16]
                     [--megatron-layer-spec transformer_engine|local]
  convert_checkpoint --from DIR [--iteration N] --to-hf HF_DIR [--dtype fp32|bf16|fp16]
                     [--architecture NAME] [--max-shard-size N[KB|MB|GB|KiB|MiB|GiB]]
                     [--no-merge-lora | --peft-adapter ADAPTER_DIR]

Import (--from-hf): reads HF_DIR/config.json and its safetensors (model.safetensors, or the
shards of model.safetensors.index.json) and writes a native checkpoint DIR/iter_0000000, laid out
as a run with the given tensor/pipeline/expert parallel sizes saves it (any layout loads it
anyway). With --recipe, the recipe's model section must match config.json (an error names the
first difference) and its parallel section gives the layout; without, DIR/recipe.yaml is written:
the model section from config.json, checkpoint.pretrained DIR.
Megatron-LM (--from-megatron): MEGATRON_DIR is a --save directory (its
latest_checkpointed_iteration.txt, or --iteration N) or an iter_NNNNNNN directory, in the
torch_dist format (.metadata + .distcp files) or the legacy torch one (mp_rank_TT[_PPP]/
model_optim_rng.pt), of any tensor/pipeline/expert layout. GPT-family models (GPT; LLaMA-style
RMSNorm, SwiGLU, grouped-query attention, rope; Mixtral-style routed experts). DIR gets iter_NNNNNNN at Megatron's iteration,
recipe.yaml (model, training, optimizer and schedule from the saved args; checkpoint.load DIR)
and megatron_args.txt (each arg mapped to a recipe key or ignored). The distributed optimizer's
state (Adam's moments, its step count; dp_reshardable, fully_reshardable or distrib_optim.pt;
fp32 runs of dense models at pp 1) comes along when the checkpoint has it, and the recipe
continues the run; otherwise, or with --weights-only, the recipe fine-tunes
(checkpoint.finetune). Pickles are read by a restricted unpickler:
nothing in the checkpoint is run.
Megatron-LM export (--to-megatron): OUT (new or empty) gets latest_checkpointed_iteration.txt and
iter_NNNNNNN in --format torch_dist (default: one data file, loadable into any layout) or torch
(mp_rank files for --tensor-parallel x --pipeline-parallel, named for --megatron-layer-spec,
default transformer_engine as Megatron-LM's default --transformer-impl), the args from the
recipe. Weights only: load it with --no-load-optim --no-load-rng, or --finetune.
Export (--to-hf): writes HF_DIR (which must not exist or be empty) with config.json and the
weights in --dtype (default: the dtype the checkpoint was imported from, else fp32). The
architecture is the imported one, or chosen from the model (gpt: GPT2LMHeadModel, llama:
LlamaForCausalLM, with add_qkv_bias: Qwen2ForCausalLM, with qk_layernorm: Qwen3ForCausalLM,
with experts: MixtralForCausalLM; Phi3ForCausalLM when imported as one;
bert: BertForPreTraining with data.bert_binary_head, else BertForMaskedLM). A LoRA checkpoint
(peft: lora) is exported with its adapters merged (W + alpha/r B A); --no-merge-lora exports the
frozen base alone, and --peft-adapter ADAPTER_DIR does so and writes the adapters as a Hugging
Face PEFT adapter (adapter_config.json + adapter_model.safetensors) for that base.
Both directions stream tensor by tensor and are exact; output appears only when complete.
Supported architectures: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, MixtralForCausalLM, BertForPreTraining, BertForMaskedLM.
)";

struct Args {
  std::string from_hf, from_megatron, to, from, to_hf, to_megatron, recipe, dtype, architecture,
      peft_adapter, format, layer_spec;
  bool no_merge_lora = false, weights_only = false;
  std::vector<std::string> sets;
  std::optional<int64_t> iteration, tp, pp, ep;
  uint64_t max_shard_bytes = uint64_t{5} << 30;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "convert_checkpoint: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

uint64_t byte_size(tools::FlagReader& flags) {
  const std::string v = flags.value();
  char* end = nullptr;
  const double n = std::strtod(v.c_str(), &end);
  const std::string unit = end;
  const std::pair<const char*, double> units[] = {
      {"", 1},         {"KB", 1e3},        {"MB", 1e6},          {"GB", 1e9},
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  // Past 2^62 bytes the conversion to an integer would overflow (into tiny shards).
  constexpr double kMax = 4611686018427387904.0;
  for (const auto& [name, mult] : units) {
    if (unit != name || v.empty() || !(n > 0)) continue;
    if (!(n * mult <= kMax))
      flags.fail("--max-shard-size: '" + v + "' is too large (at most 4 EiB)");
    if (n * mult >= 1) return static_cast<uint64_t>(n * mult);
  }
  flags.fail("--max-shard-size: '" + v + "' is not a positive size (N, NKB, NMB, NGB, NKiB ...)");
}

// Exactly one direction: an import (--from-hf or --from-megatron, --to) or an export (--from,
// --to-hf or --to-megatron).
void check_directions(const Args& a) {
  const bool import = !a.from_hf.empty() || !a.from_megatron.empty() || !a.to.empty();
  const bool exp = !a.from.empty() || !a.to_hf.empty() || !a.to_megatron.empty();
  if (import == exp)
    usage_error(
        "give either --from-hf HF_DIR --to DIR, --from-megatron MEGATRON_DIR --to DIR or --from "
        "DIR --to-hf HF_DIR");
  if (!a.from_hf.empty() && !a.from_megatron.empty())
    usage_error("--from-hf and --from-megatron are two imports: give one");
  if (import && (a.to.empty() || (a.from_hf.empty() && a.from_megatron.empty())))
    usage_error(a.from_megatron.empty() ? "--from-hf and --to go together"
                                        : "--from-megatron and --to go together");
  if (!a.to_hf.empty() && !a.to_megatron.empty())
    usage_error("--to-hf and --to-megatron are two exports: give one");
  if (exp && (a.from.empty() || (a.to_hf.empty() && a.to_megatron.empty())))
    usage_error("--from and --to-hf (or --to-megatron) go together");
}

void check_megatron_flags(const Args& a) {
  if (!a.from_megatron.empty() &&
      (!a.dtype.empty() || !a.architecture.empty() || a.no_merge_lora || !a.peft_adapter.empty()))
    usage_error(
        "--from-megatron takes --iteration, --recipe, --set, --tensor-parallel, "
        "--pipeline-parallel, --expert-parallel and --weights-only");
  if ((!a.format.empty() || !a.layer_spec.empty()) && a.to_megatron.empty())
    usage_error("--format and --megatron-layer-spec are --to-megatron flags");
  if (a.weights_only && a.from_megatron.empty())
    usage_error("--weights-only is a --from-megatron flag");
  if (!a.format.empty() && a.format != "torch_dist" && a.format != "torch")
    usage_error("--format must be torch_dist or torch, got '" + a.format + "'");
  if (!a.layer_spec.empty() && a.layer_spec != "transformer_engine" && a.layer_spec != "local")
    usage_error("--megatron-layer-spec must be transformer_engine or local, got '" + a.layer_spec +
                "'");
  if (!a.to_megatron.empty() &&
      (!a.architecture.empty() || a.no_merge_lora || !a.peft_adapter.empty() || a.ep))
    usage_error(
        "--architecture, --no-merge-lora, --peft-adapter and --expert-parallel are not "
        "--to-megatron flags");
  if (!a.to_megatron.empty() && a.format != "torch" && (a.tp || a.pp))
    usage_error(
        "--tensor-parallel and --pipeline-parallel lay out --format torch's rank files "
        "(torch_dist loads into any layout)");
}

// Flags of one direction given with the other, and values out of range.
void check_shared_flags(const Args& a) {
  if (!a.from_hf.empty() && (!a.dtype.empty() || !a.architecture.empty() || a.iteration ||
                             a.no_merge_lora || !a.peft_adapter.empty()))
    usage_error(
        "--dtype, --architecture, --iteration, --no-merge-lora and --peft-adapter are export "
        "flags");
  if (a.no_merge_lora && !a.peft_adapter.empty())
    usage_error("--peft-adapter already exports the base unmerged; drop --no-merge-lora");
  const bool exp = !a.from.empty() || !a.to_hf.empty() || !a.to_megatron.empty();
  if (exp &&
      (!a.recipe.empty() || !a.sets.empty() || (a.to_megatron.empty() && (a.tp || a.pp || a.ep))))
    usage_error("--recipe, --set and the layout flags are import flags");
  if (!a.sets.empty() && a.recipe.empty()) usage_error("--set needs --recipe");
  if (!a.dtype.empty() && hf::dtype_from_flag(a.dtype).empty())
    usage_error("--dtype must be fp32, bf16 or fp16, got '" + a.dtype + "'");
}

Args parse(int argc, char** argv) {
  Args a;
  tools::FlagReader flags("convert_checkpoint", kUsage, argc, argv);
  while (flags.next()) {
    const std::string& f = flags.flag();
    if (f == "--from-hf")
      a.from_hf = flags.value();
    else if (f == "--from-megatron")
      a.from_megatron = flags.value();
    else if (f == "--to")
      a.to = flags.value();
    else if (f == "--from")
      a.from = flags.value();
    else if (f == "--to-hf")
      a.to_hf = flags.value();
    else if (f == "--to-megatron")
      a.to_megatron = flags.value();
    else if (f == "--format")
      a.format = flags.value();
    else if (f == "--megatron-layer-spec")
      a.layer_spec = flags.value();
    else if (f == "--recipe")
      a.recipe = flags.value();
    else if (f == "--set")
      a.sets.push_back(flags.value());
    else if (f == "--dtype")
      a.dtype = flags.value();
    else if (f == "--architecture")
      a.architecture = flags.value();
    else if (f == "--iteration")
      a.iteration = flags.integer(0);
    else if (f == "--tensor-parallel")
      a.tp = flags.integer(1);
    else if (f == "--pipeline-parallel")
      a.pp = flags.integer(1);
    else if (f == "--expert-parallel")
      a.ep = flags.integer(1);
    else if (f == "--no-merge-lora")
      a.no_merge_lora = true;
    else if (f == "--weights-only")
      a.weights_only = true;
    else if (f == "--peft-adapter")
      a.peft_adapter = flags.value();
    else if (f == "--max-shard-size")
      a.max_shard_bytes = byte_size(flags);
    else
      flags.fail("unexpected argument '" + f + "'");
  }
  check_directions(a);
  check_megatron_flags(a);
  check_shared_flags(a);
  return a;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int import_hf(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  models::HfImportOptions o;
  o.hf_dir = a.from_hf, o.out_dir = a.to, o.recipe = a.recipe, o.overrides = a.sets;
  o.tp = a.tp, o.pp = a.pp, o.ep = a.ep;
  const models::HfImportResult r = models::import_hf_checkpoint(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("imported %s (%s, %zu tensors) into %s/iter_0000000 (tp %lld, pp %lld, ep %lld)\n",
              a.from_hf.c_str(), r.architecture.c_str(), r.tensors, a.to.c_str(),
              static_cast<long long>(r.tp), static_cast<long long>(r.pp),
              static_cast<long long>(r.ep));
  if (!r.recipe_path.empty()) std::printf("recipe: %s\n", r.recipe_path.c_str());
  for (const std::string& part : r.left_out) std::printf("left out: %s\n", part.c_str());
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

int import_megatron(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  models::MegatronImportOptions o;
  o.megatron_dir = a.from_megatron, o.out_dir = a.to, o.iteration = a.iteration;
  o.recipe = a.recipe, o.overrides = a.sets, o.tp = a.tp, o.pp = a.pp, o.ep = a.ep;
  o.weights_only = a.weights_only;
  const models::MegatronImportResult r = models::import_megatron_checkpoint(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "imported %s (Megatron-LM %s, tp %lld pp %lld ep %lld, iteration %lld, %lld samples "
      "consumed, %zu tensors) into %s (tp %lld, pp %lld, ep %lld)\n",
      r.source_dir.c_str(), r.format.c_str(), static_cast<long long>(r.source_tp),
      static_cast<long long>(r.source_pp), static_cast<long long>(r.source_ep),
      static_cast<long long>(r.iteration), static_cast<long long>(r.consumed_samples), r.tensors,
      a.to.c_str(), static_cast<long long>(r.tp), static_cast<long long>(r.pp),
      static_cast<long long>(r.ep));
  if (!r.recipe_path.empty()) std::printf("recipe: %s\n", r.recipe_path.c_str());
  std::printf("args: %s\n", r.args_report_path.c_str());
  if (r.optimizer_state)
    std::printf(
        "optimizer: Adam's moments and %lld steps (Megatron's %s state); the recipe "
        "continues the run\n",
        static_cast<long long>(r.optimizer_steps), r.optimizer_sharding.c_str());
  else
    std::printf("optimizer: none imported (%s); the recipe fine-tunes from the weights\n",
                a.weights_only ? "--weights-only" : "the checkpoint has none");
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

int export_megatron(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  models::MegatronExportOptions o;
  o.native_dir = a.from, o.iteration = a.iteration, o.out_dir = a.to_megatron;
  o.format = a.format == "torch" ? mlm::Format::Torch : mlm::Format::TorchDist;
  o.tp = a.tp.value_or(1), o.pp = a.pp.value_or(1);
  o.spec = a.layer_spec == "local" ? mlm::LayerSpec::Local : mlm::LayerSpec::TransformerEngine;
  o.dtype = hf::dtype_from_flag(a.dtype);
  const models::MegatronExportResult r = models::export_megatron_checkpoint(o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "exported %s (iteration %lld, %zu tensors, padded vocabulary %lld) to %s as "
      "Megatron-LM %s, %s\n",
      r.checkpoint_path.c_str(), static_cast<long long>(r.iteration), r.tensors,
      static_cast<long long>(r.padded_vocab), a.to_megatron.c_str(), mlm::format_name(o.format),
      hf::torch_name(r.dtype).c_str());
  std::printf(
      "load it in Megatron-LM with --load %s --no-load-optim --no-load-rng%s\n",
      a.to_megatron.c_str(),
      o.format == mlm::Format::Torch ? "" : " (any --tensor/--pipeline-model-parallel-size)");
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

int export_hf(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  models::HfExportOptions o;
  o.native_dir = a.from, o.iteration = a.iteration, o.hf_dir = a.to_hf;
  o.dtype = hf::dtype_from_flag(a.dtype), o.architecture = a.architecture;
  o.max_shard_bytes = a.max_shard_bytes;
  o.merge_lora = !a.no_merge_lora && a.peft_adapter.empty();
  models::PeftExportOptions p;
  p.native_dir = a.from, p.iteration = a.iteration, p.out_dir = a.peft_adapter;
  p.architecture = a.architecture, p.base_model = a.to_hf;
  // The adapter is checked (a LoRA checkpoint, a free target) before the base is written.
  if (!a.peft_adapter.empty()) models::check_peft_export(p);
  const models::HfExportResult r = models::export_hf_checkpoint(o);
  if (!a.peft_adapter.empty()) {
    p.architecture = r.architecture;
    const models::PeftExportResult pr = models::export_peft_adapter(p);
    std::string modules;
    for (const auto& m : pr.target_modules) modules += (modules.empty() ? "" : ", ") + m;
    std::printf("PEFT adapter (LoRA r %lld, alpha %g; %s) written to %s\n",
                static_cast<long long>(pr.rank), pr.alpha, modules.c_str(), a.peft_adapter.c_str());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("exported %s (iteration %lld) to %s as %s, %s\n", r.checkpoint_path.c_str(),
              static_cast<long long>(r.iteration), a.to_hf.c_str(), r.architecture.c_str(),
              hf::torch_name(r.dtype).c_str());
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    if (!a.from_megatron.empty()) return import_megatron(a);
    if (!a.to_megatron.empty()) return export_megatron(a);
    return a.from_hf.empty() ? export_hf(a) : import_hf(a);
  } catch (const megatron::InputError& e) {
    std::fprintf(stderr, "convert_checkpoint: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
