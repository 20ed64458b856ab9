#include "megatron/training/metrics.h"

#include <omp.h>
#include <sys/resource.h>

#include <filesystem>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "megatron/core/device_memory.h"
#include "megatron/core/format.h"

namespace megatron::training {

namespace {
// " (92% of gemm)" beside MFU when a GEMM rate was measured. Above 100% (after the trainer's
// re-measurements) the step's GEMMs ran faster than the probe's 1024-cube: said, not hidden.
std::string of_gemm_text(double of_gemm) {
  if (of_gemm <= 0) return "";
  std::ostringstream s;
  s << std::fixed << std::setprecision(0) << " (" << of_gemm * 100 << "% of gemm"
    << (of_gemm > 1.0 ? ": the step's GEMMs outran the probe's 1024^3 GEMM" : "") << ")";
  return s.str();
}
}  // namespace

MetricsSink::MetricsSink(const config::Recipe& recipe, bool is_logger, std::ostream& console,
                         const ComputePeak& peak, Device device, int ranks)
    : train_iters_(recipe.training.train_iters),
      is_logger_(is_logger),
      console_(&console),
      device_(device) {
  if (!is_logger_) return;
  // Where the run writes, resolved one fixed way (relative paths against the working directory).
  std::string outputs;
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"checkpoint.save", recipe.checkpoint.save},
        {"logging.jsonl", recipe.logging.jsonl},
        {"logging.tensorboard_dir", recipe.logging.tensorboard_dir},
        {"logging.timeline", recipe.logging.timeline}})
    if (!path.empty())
      outputs += concat(outputs.empty() ? "" : ", ", key, " ", config::resolve_output_path(path));
  if (!outputs.empty()) *console_ << "outputs: " << outputs << "\n";
  if (!recipe.logging.jsonl.empty()) {
    const std::string path = config::resolve_output_path(recipe.logging.jsonl);
    const auto parent = std::filesystem::path(path).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    jsonl_path_ = path;
    jsonl_.open(path, std::ios::app);
    MT_INPUT_CHECK(jsonl_.good(), "logging.jsonl: cannot open '", path, "' for writing");
    nlohmann::json start = peak.to_json();
    start["event"] = "start";
    start["device"] = device_name(device);
    start["threads_per_rank"] = omp_get_max_threads();
    start["ranks"] = ranks;
    jsonl_ << start.dump() << "\n" << std::flush;
    check_jsonl();
  }
  if (!recipe.logging.tensorboard_dir.empty())
    tensorboard_ = std::make_unique<TensorBoardWriter>(
        config::resolve_output_path(recipe.logging.tensorboard_dir));
}

MetricsSink::~MetricsSink() = default;

// A log that silently stops being written is worse than a stopped run (disk full, quota).
void MetricsSink::check_jsonl() {
  MT_INPUT_CHECK(jsonl_.good(), "logging.jsonl: writing '", jsonl_path_,
                 "' failed (disk full or quota?)");
}

void MetricsSink::step(const StepMetrics& m, bool to_console) {
  if (!is_logger_) return;
  std::ostream& out = *console_;
  const StreamFormatGuard format(out);
  if (to_console)
    out << "iter " << std::setw(6) << m.iteration << "/" << train_iters_ << " | loss " << std::fixed
        << std::setprecision(4) << m.loss;
  if (to_console && m.has_aux) out << " (lm " << m.lm_loss << " + nsp " << m.aux_loss << ")";
  if (to_console && m.has_moe)
    out << " | moe aux " << std::setprecision(4) << m.moe_aux_loss << " z " << m.moe_z_loss
        << " imbalance " << std::setprecision(2) << m.moe_load_imbalance << " dropped "
        << std::setprecision(1) << m.moe_dropped_fraction * 100 << "%";
  if (to_console)
    out << " | lr " << std::scientific << std::setprecision(3) << m.lr << " | grad_norm "
        << std::fixed << std::setprecision(3) << m.grad_norm << " | " << std::setprecision(1)
        << m.seconds * 1000 << " ms | " << std::setprecision(0) << m.tokens_per_s << " tok/s | "
        << std::setprecision(3) << m.tflops << " TFLOP/s | MFU " << std::setprecision(1)
        << m.mfu * 100 << "%" << of_gemm_text(m.of_gemm) << " | mem " << std::setprecision(0)
        << static_cast<double>(memory_stats(device_).peak_bytes) / 1048576.0 << " MiB"
        << (m.skipped ? " | skipped (fp16 overflow)" : "")
        << (m.no_targets ? " | no predicted token in the global batch: zero-gradient step" : "")
        << "\n"
        << std::flush;
  if (jsonl_.is_open()) {
    nlohmann::json j = {{"iteration", m.iteration},
                        {"loss", m.loss},
                        {"lm_loss", m.lm_loss},
                        {"lr", m.lr},
                        {"grad_norm", m.grad_norm},
                        {"step_seconds", m.seconds},
                        {"tokens_per_s", m.tokens_per_s},
                        {"tflops", m.tflops},
                        {"mfu", m.mfu},
                        {"of_gemm", m.of_gemm},
                        {"loss_scale", m.loss_scale},
                        {"skipped", m.skipped},
                        {"no_targets", m.no_targets},
                        {"dp_comm_bytes", m.dp_comm_bytes},
                        {"time_split",
                         {{"data_s", m.split.data},
                          {"compute_s", m.split.compute},
                          {"comm_s", m.split.comm},
                          {"pipeline_s", m.split.pipeline},
                          {"optimizer_s", m.split.optimizer}}}};
    if (m.has_aux) j["nsp_loss"] = m.aux_loss;
    if (m.has_moe) {
      j["moe_aux_loss"] = m.moe_aux_loss;
      j["moe_z_loss"] = m.moe_z_loss;
      j["moe_load_imbalance"] = m.moe_load_imbalance;
      j["moe_dropped_fraction"] = m.moe_dropped_fraction;
      j["moe_dispatch_share"] = m.moe_dispatch_share;
      j["moe_layer_imbalance"] = m.moe_layer_imbalance;
      // +inf (no choice left a candidate out) is written as null: JSON has no infinity.
      j["moe_min_routing_margin"] = m.moe_min_routing_margin;
    }
    jsonl_ << j.dump() << "\n" << std::flush;
    check_jsonl();
  }
  if (tensorboard_) {
    auto& tb = *tensorboard_;
    tb.add_scalar("lm loss", m.iteration, m.lm_loss);
    if (m.has_aux) tb.add_scalar("nsp loss", m.iteration, m.aux_loss);
    if (m.has_moe) {
      tb.add_scalar("moe aux loss", m.iteration, m.moe_aux_loss);
      tb.add_scalar("moe z loss", m.iteration, m.moe_z_loss);
      tb.add_scalar("moe load imbalance", m.iteration, m.moe_load_imbalance);
      tb.add_scalar("moe dropped fraction", m.iteration, m.moe_dropped_fraction);
      for (size_t l = 0; l < m.moe_layer_imbalance.size(); ++l)
        if (m.moe_layer_imbalance[l] > 0)
          tb.add_scalar("moe load imbalance/layer " + std::to_string(l), m.iteration,
                        m.moe_layer_imbalance[l]);
    }
    tb.add_scalar("learning-rate", m.iteration, m.lr);
    tb.add_scalar("grad-norm", m.iteration, m.grad_norm);
    tb.add_scalar("loss-scale", m.iteration, m.loss_scale);
    tb.add_scalar("tokens-per-sec", m.iteration, m.tokens_per_s);
    tb.add_scalar("tflops", m.iteration, m.tflops);
    tb.add_scalar("mfu", m.iteration, m.mfu);
    tb.flush();
  }
}

void MetricsSink::stragglers(const StragglerReport& r) {
  if (!is_logger_) return;
  *console_ << r.describe() << "\n" << std::flush;
  if (jsonl_.is_open()) {
    nlohmann::json j = r.to_json();
    j["event"] = "stragglers";
    j["iteration"] = r.last_iteration;
    jsonl_ << j.dump() << "\n" << std::flush;
    check_jsonl();
  }
  if (tensorboard_ && !r.ranks.empty()) {
    tensorboard_->add_scalar("stragglers/slowest ratio", r.last_iteration, r.ranks.front().ratio);
    tensorboard_->add_scalar("stragglers/slowest rank", r.last_iteration, r.ranks.front().rank);
    tensorboard_->add_scalar("stragglers/median busy seconds", r.last_iteration, r.median_busy);
    tensorboard_->flush();
  }
}

void MetricsSink::eval(const EvalMetrics& e) {
  if (!is_logger_) return;
  std::ostream& out = *console_;
  const StreamFormatGuard format(out);
  out << "validation at iter " << e.iteration << " | val_loss " << std::fixed
      << std::setprecision(4) << e.loss << " | val_ppl " << std::setprecision(2) << e.perplexity;
  if (e.has_aux) out << " | val_nsp_loss " << std::setprecision(4) << e.aux_loss;
  out << "\n" << std::flush;
  if (jsonl_.is_open()) {
    nlohmann::json j = {
        {"iteration", e.iteration}, {"val_loss", e.loss}, {"val_ppl", e.perplexity}};
    if (e.has_aux) j["val_nsp_loss"] = e.aux_loss;
    jsonl_ << j.dump() << "\n" << std::flush;
    check_jsonl();
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("lm loss validation", e.iteration, e.loss);
    if (e.has_aux) tensorboard_->add_scalar("nsp loss validation", e.iteration, e.aux_loss);
    tensorboard_->flush();
  }
}

void report_rank_memory(parallel::Communicator& world, Device device, std::ostream& out) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // Linux reports ru_maxrss in KiB.
  double mine[2] = {static_cast<double>(memory_stats(device).peak_bytes) / 1048576.0,
                    static_cast<double>(usage.ru_maxrss) / 1024.0};
  const int n = world.size();
  std::vector<double> all(static_cast<size_t>(2 * n));
  Tensor in = Tensor::wrap(mine, {2}, DType::F64),
         gathered = Tensor::wrap(all.data(), {2 * n}, DType::F64);
  world.all_gather(in, gathered);
  if (world.rank() != 0) return;
  const StreamFormatGuard format(out);  // the caller's number format is left as it was
  out << "peak memory per rank (" << device_name(device) << " tensors / process RSS, MiB):";
  for (int r = 0; r < n; ++r)
    out << (r ? "," : "") << " " << r << ": " << std::fixed << std::setprecision(0)
        << all[static_cast<size_t>(2 * r)] << " / " << all[static_cast<size_t>(2 * r + 1)];
  out << "\n" << std::flush;
}

}  // namespace megatron::training
