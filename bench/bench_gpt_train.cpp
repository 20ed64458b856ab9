// End-to-end training throughput of the CPU trainer on the GPT-2 124M shape.
//
// Builds a Trainer from a recipe string (12 layers, hidden 768, 12 heads, seq 256, vocab 50257
// padded to 50304, tied embeddings, no dropout, AdamW, micro = global batch 8) over synthetic
// random tokens, runs --warmup steps untimed and --steps timed, and prints one line per step and
// a summary: tokens/s, TFLOP/s by Megatron's formula (planning::megatron_flops_per_step), MFU
// against the hardware peak for the precision (planning::measure_cpu_peak, register-only loops;
// the better of a measurement before and one after the run), the share of the measured GEMM rate,
// and peak memory.
// bench/pytorch_gpt.py runs the same model in PyTorch and prints the same summary;
// bench/run_train_bench.sh runs both side by side.
//
//   bench_gpt_train [--steps N] [--warmup W] [--layers L] [--seq S] [--micro-batch B]
//                   [--global-batch G] [--hidden D] [--heads H] [--vocab V] [--threads T]
//                   [--seed X] [--precision fp32|bf16] [--json PATH]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "megatron/planning/flops.h"
#include "megatron/training/trainer.h"

namespace {

using namespace megatron;

struct Options {
  int64_t steps = 5, warmup = 2;
  int64_t layers = 12, hidden = 768, heads = 12, seq = 256, vocab = 50257;
  int64_t micro_batch = 8, global_batch = 0;  // 0 -> = micro_batch
  int64_t threads = 0;                        // 0 -> OpenMP default (OMP_NUM_THREADS)
  int64_t seed = 1234;
  std::string precision = "fp32";
  std::string json;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "bench_gpt_train: " << problem
            << "\nusage: bench_gpt_train [--steps N] [--warmup W] [--layers L] [--seq S]"
               " [--micro-batch B] [--global-batch G] [--hidden D] [--heads H] [--vocab V]"
               " [--threads T] [--seed X] [--precision fp32|bf16] [--json PATH]\n";
  std::exit(2);
}

int64_t parse_int(std::string_view flag, std::string_view text, int64_t min) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min)
    usage(std::string(flag) + " needs an integer >= " + std::to_string(min) + ", got '" +
          std::string(text) + "'");
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("help");
    if (i + 1 >= argc) usage(std::string(flag) + " needs a value");
    const std::string_view value = argv[++i];
    if (flag == "--steps")
      o.steps = parse_int(flag, value, 1);
    else if (flag == "--warmup")
      o.warmup = parse_int(flag, value, 0);
    else if (flag == "--layers")
      o.layers = parse_int(flag, value, 1);
    else if (flag == "--hidden")
      o.hidden = parse_int(flag, value, 1);
    else if (flag == "--heads")
      o.heads = parse_int(flag, value, 1);
    else if (flag == "--seq")
      o.seq = parse_int(flag, value, 1);
    else if (flag == "--vocab")
      o.vocab = parse_int(flag, value, 2);
    else if (flag == "--micro-batch")
      o.micro_batch = parse_int(flag, value, 1);
    else if (flag == "--global-batch")
      o.global_batch = parse_int(flag, value, 1);
    else if (flag == "--threads")
      o.threads = parse_int(flag, value, 0);
    else if (flag == "--seed")
      o.seed = parse_int(flag, value, 0);
    else if (flag == "--precision") {
      o.precision = std::string(value);
      if (o.precision != "fp32" && o.precision != "bf16")
        usage("--precision must be fp32 or bf16, got '" + o.precision + "'");
    } else if (flag == "--json")
      o.json = std::string(value);
    else
      usage("unknown flag '" + std::string(flag) + "'");
  }
  if (o.global_batch == 0) o.global_batch = o.micro_batch;
  if (o.global_batch % o.micro_batch != 0)
    usage("--global-batch must be a multiple of --micro-batch");
  if (o.hidden % o.heads != 0) usage("--hidden must be divisible by --heads");
  return o;
}

// Uniformly random token ids in [0, vocab): sample i, position t is a hash of (seed, i, t), so
// every run sees the same data without storing it.
class RandomTokens final : public training::SampleSource {
 public:
  RandomTokens(int64_t seq, int64_t vocab, uint64_t seed) : seq_(seq), vocab_(vocab), seed_(seed) {}
  int64_t seq_length() const override { return seq_; }
  int64_t samples_per_epoch() const override { return int64_t{1} << 40; }
  void get(int64_t index, int32_t* tokens) const override {
    for (int64_t t = 0; t <= seq_; ++t) {
      const uint64_t h =
          splitmix(seed_ ^ splitmix(static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull +
                                    static_cast<uint64_t>(t)));
      tokens[t] = static_cast<int32_t>(h % static_cast<uint64_t>(vocab_));
    }
  }

 private:
  static uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }
  int64_t seq_, vocab_;
  uint64_t seed_;
};

// GPT-2 small as in recipes/gpt2_124m.yaml, resized by the flags, on the CPU (fp32, or bf16 mixed
// precision with fp32 master weights as in pretrain's training.precision: bf16). The LR is
// constant (no warm-up, no decay) so every timed step does the same work as PyTorch's.
std::string recipe_yaml(const Options& o) {
  std::ostringstream y;
  y << "model:\n"
    << "  arch: gpt\n"
    << "  num_layers: " << o.layers << "\n"
    << "  hidden_size: " << o.hidden << "\n"
    << "  num_attention_heads: " << o.heads << "\n"
    << "  ffn_hidden_size: " << 4 * o.hidden << "\n"
    << "  seq_length: " << o.seq << "\n"
    << "  max_position_embeddings: " << o.seq << "\n"
    << "  normalization: layernorm\n"
    << "  activation: gelu\n"
    << "  position_embedding: learned\n"
    << "  tie_embeddings: true\n"
    << "  add_bias: true\n"
    << "  hidden_dropout: 0.0\n"
    << "  attention_dropout: 0.0\n"
    << "  make_vocab_size_divisible_by: 128\n"
    << "training:\n"
    << "  device: cpu\n"
    << "  precision: " << o.precision << "\n"
    << "  micro_batch_size: " << o.micro_batch << "\n"
    << "  global_batch_size: " << o.global_batch << "\n"
    << "  train_iters: " << o.warmup + o.steps << "\n"
    << "  eval_interval: 0\n"
    << "  eval_iters: 0\n"
    << "  seed: " << o.seed << "\n"
    << "  threads: " << o.threads << "\n"
    << "optimizer:\n"
    << "  type: adamw\n"
    << "  lr: 6.0e-4\n"
    << "  min_lr: 6.0e-4\n"
    << "  weight_decay: 0.1\n"
    << "  beta1: 0.9\n"
    << "  beta2: 0.95\n"
    << "  eps: 1.0e-8\n"
    << "  clip_grad: 1.0\n"
    << "  schedule: {warmup_iters: 0, decay: constant}\n"
    << "data:\n"
    << "  tokenizer: {type: NullTokenizer, vocab_size: " << o.vocab << "}\n"
    << "  train: [{path: synthetic}]\n"
    << "logging: {interval: 1000000}\n";
  return y.str();
}

double peak_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(const Options& o) {
  const config::Recipe recipe = config::parse_recipe_string(recipe_yaml(o), "bench_gpt_train.yaml");
  auto source = std::make_shared<RandomTokens>(o.seq, o.vocab, static_cast<uint64_t>(o.seed));
  auto world = parallel::make_single_process_communicator();
  std::ostringstream trainer_log;
  training::Trainer trainer(recipe, o.vocab, source, nullptr, *world, trainer_log);
  std::cout << trainer_log.str();

  const int threads = omp_get_max_threads();
  const int64_t tokens_per_step = o.global_batch * o.seq;
  const double flops = trainer.flops_per_step(), peak_start = trainer.peak_flops();
  std::printf(
      "bench_gpt_train: layers %lld hidden %lld heads %lld seq %lld micro %lld global %lld"
      " vocab %lld; %s; %lld parameters; %.4f TFLOP/step; hardware peak %.1f GFLOP/s on %d"
      " threads\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.hidden),
      static_cast<long long>(o.heads), static_cast<long long>(o.seq),
      static_cast<long long>(o.micro_batch), static_cast<long long>(o.global_batch),
      static_cast<long long>(o.vocab), o.precision.c_str(),
      static_cast<long long>(trainer.params().numel()), flops / 1e12, peak_start / 1e9, threads);

  std::vector<double> timed;
  double first_loss = 0, last_loss = 0;
  for (int64_t it = 1; it <= o.warmup + o.steps; ++it) {
    const training::StepMetrics m = trainer.train_step(it);
    const bool warm = it <= o.warmup;
    if (!warm) timed.push_back(m.seconds);
    if (it == 1) first_loss = m.loss;
    last_loss = m.loss;
    std::printf(
        "%s step %3lld | loss %.4f | grad_norm %.3f | %8.1f ms | %7.1f tok/s | %.4f"
        " TFLOP/s\n",
        warm ? "warmup" : "timed ", static_cast<long long>(it), m.loss, m.grad_norm,
        m.seconds * 1e3, m.tokens_per_s, m.tflops);
    std::fflush(stdout);
  }

  // The hardware peak again after the run; MFU uses the better of the two, so a burst of load
  // from other processes during one measurement does not inflate MFU.
  const DType compute = o.precision == "bf16" ? DType::BF16 : DType::F32;
  const double peak_end = planning::measure_cpu_peak(compute).flops;
  const training::ComputePeak& cp = trainer.compute_peak();
  const double peak = std::max(peak_start, peak_end);
  double total = 0;
  for (double s : timed) total += s;
  const double mean_s = total / static_cast<double>(timed.size());
  const double tok_s = static_cast<double>(tokens_per_step) / mean_s;
  const double tflops = flops / mean_s / 1e12;
  const double mfu = flops / mean_s / peak;
  const double tracked_mib = static_cast<double>(cpu_memory_stats().peak_bytes) / 1048576.0;
  const double rss_mib = peak_rss_mib();
  std::printf(
      "SUMMARY impl=megatron-cpp threads=%d steps=%zu tokens/s=%.1f TFLOP/s=%.4f"
      " MFU=%.1f%% of_gemm=%.1f%% ms/step=%.1f (median %.1f, min %.1f) peak_GFLOP/s=%.1f"
      " (start %.1f, end %.1f)"
      " peak_mem_tensors_MiB=%.0f peak_rss_MiB=%.0f loss %.4f -> %.4f\n",
      threads, timed.size(), tok_s, tflops, mfu * 100, 100 * flops / mean_s / cp.gemm_flops,
      mean_s * 1e3, median(timed) * 1e3, *std::min_element(timed.begin(), timed.end()) * 1e3,
      peak / 1e9, peak_start / 1e9, peak_end / 1e9, tracked_mib, rss_mib, first_loss, last_loss);

  if (!o.json.empty()) {
    nlohmann::json j = {{"impl", "megatron-cpp"},
                        {"precision", o.precision},
                        {"cpu", cp.cpu},
                        {"isa", cp.isa},
                        {"gemm", cp.gemm_path},
                        {"peak_isa", cp.peak_isa},
                        {"gemm_flops", cp.gemm_flops},
                        {"threads", threads},
                        {"layers", o.layers},
                        {"hidden", o.hidden},
                        {"heads", o.heads},
                        {"seq", o.seq},
                        {"micro_batch", o.micro_batch},
                        {"global_batch", o.global_batch},
                        {"vocab", o.vocab},
                        {"padded_vocab", recipe.model.padded_vocab_size(o.vocab)},
                        {"parameters", trainer.params().numel()},
                        {"warmup", o.warmup},
                        {"steps", static_cast<int64_t>(timed.size())},
                        {"step_seconds", timed},
                        {"mean_step_seconds", mean_s},
                        {"median_step_seconds", median(timed)},
                        {"tokens_per_s", tok_s},
                        {"flops_per_step", flops},
                        {"tflops", tflops},
                        {"peak_flops", peak},
                        {"peak_flops_start", peak_start},
                        {"peak_flops_end", peak_end},
                        {"mfu", mfu},
                        {"peak_mem_tensors_mib", tracked_mib},
                        {"peak_rss_mib", rss_mib},
                        {"first_loss", first_loss},
                        {"last_loss", last_loss}};
    std::ofstream f(o.json);
    if (!f) {
      std::cerr << "bench_gpt_train: cannot write " << o.json << "\n";
      return 1;
    }
    f << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::cerr << "bench_gpt_train: " << e.what() << "\n";
    return 1;
  }
}
