// The plan tool's command line (tools/plan_cli.h).
#include "tools/plan_cli.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ostream>

#include "data/tokenizer.h"
#include "megatron/core/error.h"
#include "megatron/planning/flops.h"
#include "megatron/planning/planner.h"

namespace megatron::planning {

double parse_memory_size(const std::string& text) {
  std::string s = text;
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  size_t unit_at = s.find_first_not_of("0123456789.eE+-");
  // "1e9" style numbers: an 'e' followed by a digit belongs to the number.
  std::string number = s.substr(0, unit_at),
              unit = unit_at == std::string::npos ? "" : s.substr(unit_at);
  unit.erase(0, unit.find_first_not_of(" \t"));
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double value = 0;
  const char* end = number.data() + number.size();
  auto [ptr, ec] = std::from_chars(number.data(), end, value);
  MT_INPUT_CHECK(!number.empty() && ec == std::errc() && ptr == end && std::isfinite(value),
                 "expected a size like 80GB, 80GiB or 80 (GB), got '", text, "'");
  double scale = 0;
  if (unit.empty() || unit == "gb" || unit == "g")
    scale = 1e9;
  else if (unit == "gib")
    scale = 1073741824.0;
  else if (unit == "tb" || unit == "t")
    scale = 1e12;
  else if (unit == "tib")
    scale = 1099511627776.0;
  else if (unit == "mb" || unit == "m")
    scale = 1e6;
  else if (unit == "mib")
    scale = 1048576.0;
  MT_INPUT_CHECK(scale > 0, "unknown size unit '", unit, "' in '", text,
                 "' (use MB, MiB, GB, GiB, TB or TiB)");
  MT_INPUT_CHECK(value > 0, "a size must be > 0, got '", text, "'");
  return value * scale;
}

namespace {

int64_t parse_positive_int(const std::string& flag, const std::string& v) {
  int64_t x = 0;
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, x);
  MT_INPUT_CHECK(!v.empty() && ec == std::errc() && ptr == end && x > 0, flag,
                 ": expected a positive integer, got '", v, "'");
  return x;
}

double parse_positive_double(const std::string& flag, const std::string& v) {
  double x = 0;
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, x);
  MT_INPUT_CHECK(!v.empty() && ec == std::errc() && ptr == end && std::isfinite(x) && x > 0, flag,
                 ": expected a positive number, got '", v, "'");
  return x;
}

}  // namespace

std::string plan_usage() {
  return "usage: plan --recipe R.yaml [--set key=value ...] [--nodes N] [--gpus-per-node G]\n"
         "            [--gpu-memory 80GB] [--gpu-tflops 989] [--intra-node-gbps 450]\n"
         "            [--inter-node-gbps 50] [--efficiency 0.6] [--no-flash-attention]\n"
         "            [--vocab V] [--search [--top 10]] [--json]\n"
         "Plans the recipe's layout on a cluster: parameters, memory per device (weights,\n"
         "gradients, optimizer state, activations, workspace; host memory with optimizer\n"
         "offload) under its data-parallel sharding strategy, FLOPs per step, estimated step\n"
         "time and MFU. --search ranks every (tp, pp, dp, micro-batch, recompute, sharding\n"
         "strategy: no_shard, optim, optim_grads, optim_grads_params) layout that fits,\n"
         "keeping the recipe's hybrid-sharding instances and offload. The cluster defaults to\n"
         "the recipe's cluster: section; flags override it. --gpu-memory takes GB (1e9) or\n"
         "GiB; a bare number is GB.\n"
         "Exit status: 0 fits (with --search: something fits), 3 does not fit, 1 error.\n";
}

PlanArgs parse_plan_args(const std::vector<std::string>& args) {
  PlanArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (flag.rfind("--", 0) == 0) {
      if (size_t eq = flag.find('='); eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        inline_value = true;
      }
    }
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      MT_INPUT_CHECK(i + 1 < args.size(), flag, ": needs a value");
      return args[++i];
    };
    auto no_value = [&] {
      MT_INPUT_CHECK(!inline_value, flag, ": takes no value (got '", value, "')");
    };
    if (flag == "--help" || flag == "-h") {
      no_value();
      a.help = true;
    } else if (flag == "--recipe") {
      a.recipe = take();
      MT_INPUT_CHECK(!a.recipe.empty(), "--recipe: needs a file name");
    } else if (flag == "--set") {
      a.overrides.push_back(take());
    } else if (flag == "--nodes") {
      a.nodes = parse_positive_int(flag, take());
    } else if (flag == "--gpus-per-node") {
      a.gpus_per_node = parse_positive_int(flag, take());
    } else if (flag == "--vocab") {
      a.vocab = parse_positive_int(flag, take());
    } else if (flag == "--top") {
      a.top = parse_positive_int(flag, take());
    } else if (flag == "--gpu-memory") {
      const std::string v = take();
      try {
        a.gpu_memory_bytes = parse_memory_size(v);
      } catch (const InputError& e) {
        throw InputError(concat(flag, ": ", e.what()));
      }
    } else if (flag == "--gpu-tflops") {
      a.gpu_tflops = parse_positive_double(flag, take());
    } else if (flag == "--intra-node-gbps") {
      a.intra_node_gbps = parse_positive_double(flag, take());
    } else if (flag == "--inter-node-gbps") {
      a.inter_node_gbps = parse_positive_double(flag, take());
    } else if (flag == "--efficiency") {
      const std::string v = take();
      a.efficiency = parse_positive_double(flag, v);
      MT_INPUT_CHECK(*a.efficiency <= 1, flag, ": must be in (0, 1], got '", v, "'");
    } else if (flag == "--no-flash-attention") {
      no_value();
      a.flash_attention = false;
    } else if (flag == "--search") {
      no_value();
      a.search = true;
    } else if (flag == "--json") {
      no_value();
      a.json = true;
    } else {
      throw InputError(concat("unknown argument '", args[i], "' (see --help)"));
    }
  }
  MT_INPUT_CHECK(a.help || !a.recipe.empty(), "--recipe: required (see --help)");
  return a;
}

namespace {

int64_t resolve_vocab(const config::Recipe& r, const PlanArgs& a, std::vector<std::string>& notes) {
  if (a.vocab) return *a.vocab;
  if (r.model.vocab_size > 0) return r.model.vocab_size;
  const auto& t = r.data.tokenizer;
  if (t.type == config::TokenizerType::Null || t.vocab_size > 0) return t.vocab_size;
  if (t.type == config::TokenizerType::Byte) return data::ByteTokenizer().vocab_size();
  const data::TokenizerSpec spec = data::tokenizer_spec(r);
  try {
    auto tok = data::make_tokenizer(spec);
    notes.push_back("vocabulary from " + tok->describe());
    return tok->vocab_size();
  } catch (const std::exception& e) {
    throw InputError(concat("cannot read the tokenizer to size the vocabulary (", e.what(),
                            "); pass --vocab N (e.g. 50257 for GPT-2, 32000 for LLaMA-2, 30522 "
                            "for BERT) or set model.vocab_size"));
  }
}

}  // namespace

int run_plan_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  PlanArgs a;
  config::Recipe recipe;
  ClusterSpec cluster;
  int64_t vocab = 0;
  std::vector<std::string> notes;
  try {
    a = parse_plan_args(args);
    if (a.help) {
      out << plan_usage();
      return 0;
    }
    recipe = config::load_recipe(a.recipe, a.overrides);
    cluster = cluster_from_recipe(recipe);
    if (!recipe.cluster.specified() && !a.nodes && !a.gpus_per_node)
      notes.push_back("no cluster: section or --nodes/--gpus-per-node: assuming 1 node of " +
                      std::to_string(cluster.gpus_per_node) + " devices");
    if (a.nodes) cluster.nodes = *a.nodes;
    if (a.gpus_per_node) cluster.gpus_per_node = *a.gpus_per_node;
    if (a.gpu_memory_bytes) cluster.gpu_memory_bytes = *a.gpu_memory_bytes;
    if (a.gpu_tflops) cluster.gpu_tflops = *a.gpu_tflops;
    if (a.intra_node_gbps) cluster.intra_node_gbps = *a.intra_node_gbps;
    if (a.inter_node_gbps) cluster.inter_node_gbps = *a.inter_node_gbps;
    if (a.efficiency) cluster.gemm_efficiency = *a.efficiency;
    cluster.flash_attention = a.flash_attention;
    if (recipe.training.device == config::TrainingDevice::CPU) {
      // CPU "devices" are processes: this machine's hardware peak and memory, shared per node.
      const double per_node = static_cast<double>(cluster.gpus_per_node);
      if (!a.gpu_tflops && recipe.cluster.gpu_tflops <= 0 && recipe.training.peak_tflops <= 0) {
        const DType compute =
            recipe.training.precision == config::Precision::BF16 ? DType::BF16 : DType::F32;
        cluster.gpu_tflops = planning::measure_cpu_peak(compute).flops / 1e12 / per_node;
        notes.push_back("peak: this CPU's measured hardware peak (" +
                        std::string(compute == DType::BF16 ? "bf16" : "fp32") +
                        "), shared by the " + std::to_string(cluster.gpus_per_node) +
                        " process(es) of a node");
      }
      if (!a.gpu_memory_bytes && recipe.cluster.gpu_memory_gb <= 0) {
        const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                            static_cast<double>(sysconf(_SC_PAGE_SIZE));
        if (phys > 0) {
          cluster.gpu_memory_bytes = phys / per_node;
          notes.push_back("memory: this machine's RAM shared by the process(es) of a node");
        }
      }
    }
    vocab = resolve_vocab(recipe, a, notes);
  } catch (const InputError& e) {
    err << "plan: " << e.what() << "\n";
    return 1;
  }

  std::optional<PlanReport> report;
  std::string layout_error;
  try {
    report = plan(recipe, cluster, vocab);
    report->notes.insert(report->notes.begin(), notes.begin(), notes.end());
  } catch (const InputError& e) {
    layout_error = e.what();
    if (!a.search) {
      err << "plan: the recipe's layout does not fit this cluster: " << layout_error << "\n";
      return 1;
    }
  }
  std::optional<SearchResult> found;
  if (a.search) found = search(recipe, cluster, vocab);

  if (a.json) {
    nlohmann::json j = report ? report->to_json() : nlohmann::json{{"error", layout_error}};
    if (found) {
      nlohmann::json results = nlohmann::json::array();
      for (size_t i = 0; i < found->fitting.size() && i < static_cast<size_t>(a.top); ++i)
        results.push_back(found->fitting[i].to_json());
      j = {{"plan", j},
           {"search",
            {{"candidates", found->candidates},
             {"too_big", found->too_big},
             {"fitting", found->fitting.size()},
             {"results", results}}}};
    }
    out << j.dump(2) << "\n";
  } else {
    if (report)
      out << report->to_text();
    else
      out << "the recipe's layout is not valid on this cluster: " << layout_error << "\n";
    if (found) out << "\n" << search_table(*found, static_cast<size_t>(a.top));
  }
  if (found) return found->fitting.empty() ? 3 : 0;
  return report->fits ? 0 : 3;
}

}  // namespace megatron::planning
