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
#include <optional>
#include <string>
#include <vector>

#include "megatron/hf/hf_dtype.h"
#include "models/hf_checkpoint.h"

namespace {

using namespace megatron;

constexpr const char* kUsage = R"(usage:
  convert_checkpoint --from-hf HF_DIR --to DIR [--recipe R [--set key=value ...]]
                     [--tensor-parallel N] [--pipeline-parallel N] [--expert-parallel N]
  convert_checkpoint --from DIR [--iteration N] --to-hf HF_DIR [--dtype fp32|bf16|fp16]
                     [--architecture NAME] [--max-shard-size N[KB|MB|GB|KiB|MiB|GiB]]

Import (--from-hf): reads HF_DIR/config.json and its safetensors (model.safetensors, or the
shards of model.safetensors.index.json) and writes a native checkpoint DIR/iter_0000000, laid out
as a run with the given tensor/pipeline/expert parallel sizes saves it (any layout loads it
anyway). With --recipe, the recipe's model section must match config.json (an error names the
first difference) and its parallel section gives the layout; without, DIR/recipe.yaml is written:
the model section from config.json, checkpoint.load DIR with finetune: true.
Export (--to-hf): writes HF_DIR (which must not exist or be empty) with config.json and the
weights in --dtype (default: the dtype the checkpoint was imported from, else fp32). The
architecture is the imported one, or chosen from the model (gpt: GPT2LMHeadModel, llama:
LlamaForCausalLM, with add_qkv_bias: Qwen2ForCausalLM, with experts: MixtralForCausalLM;
bert: BertForPreTraining with data.bert_binary_head, else BertForMaskedLM).
Both directions stream tensor by tensor and are exact; output appears only when complete.
Supported architectures: GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, MixtralForCausalLM, BertForPreTraining, BertForMaskedLM.
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

int64_t integer_at_least(const std::string& flag, const std::string& v, long long least) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < least)
    usage_error(concat(flag, " needs an integer >= ", least, ", got '", v, "'"));
  return n;
}
int64_t positive(const std::string& flag, const std::string& v) {
  return integer_at_least(flag, v, 1);
}

uint64_t byte_size(const std::string& v) {
  char* end = nullptr;
  const double n = std::strtod(v.c_str(), &end);
  const std::string unit = end;
  double mult = 1;
  if (unit == "GB")
    mult = 1e9;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GiB")
    mult = double(1ull << 30);
  else if (unit == "MiB")
    mult = double(1ull << 20);
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "KiB")
    mult = 1024;
  else if (!unit.empty() || v.empty())
    usage_error("--max-shard-size: '" + v + "' is not a size");
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
    } else if (f == "--from-hf")
      a.from_hf = value();
    else if (f == "--to")
      a.to = value();
    else if (f == "--from")
      a.from = value();
    else if (f == "--to-hf")
      a.to_hf = value();
    else if (f == "--recipe")
      a.recipe = value();
    else if (f == "--set")
      a.sets.push_back(value());
    else if (f == "--dtype")
      a.dtype = value();
    else if (f == "--architecture")
      a.architecture = value();
    else if (f == "--iteration")
      a.iteration = integer_at_least(f, value(), 0);
    else if (f == "--tensor-parallel")
      a.tp = positive(f, value());
    else if (f == "--pipeline-parallel")
      a.pp = positive(f, value());
    else if (f == "--expert-parallel")
      a.ep = positive(f, value());
    else if (f == "--max-shard-size")
      a.max_shard_bytes = byte_size(value());
    else
      usage_error("unexpected argument '" + f + "'");
  }
  const bool import = !a.from_hf.empty() || !a.to.empty();
  const bool exp = !a.from.empty() || !a.to_hf.empty();
  if (import == exp)
    usage_error("give either --from-hf HF_DIR --to DIR or --from DIR --to-hf HF_DIR");
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
  std::printf("time %.2f s, peak RSS %.1f MiB\n", secs, peak_rss_mib());
  return 0;
}

int export_hf(const Args& a) {
  const auto t0 = std::chrono::steady_clock::now();
  models::HfExportOptions o;
  o.native_dir = a.from, o.iteration = a.iteration, o.hf_dir = a.to_hf;
  o.dtype = hf::dtype_from_flag(a.dtype), o.architecture = a.architecture;
  o.max_shard_bytes = a.max_shard_bytes;
  const models::HfExportResult r = models::export_hf_checkpoint(o);
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
    return a.from_hf.empty() ? export_hf(a) : import_hf(a);
  } catch (const megatron::InputError& e) {
    std::fprintf(stderr, "convert_checkpoint: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert_checkpoint: error: %s\n", e.what());
    return 1;
  }
}
