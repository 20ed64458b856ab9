#include "megatron/training/compute_peak.h"

#include <algorithm>
#include <sstream>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "megatron/planning/flops.h"

namespace megatron::training {

namespace {
constexpr const char* kMeasuredSource = "measured hardware peak";
}  // namespace

ComputePeak ComputePeak::decide(Device device, DType compute_dtype, double recipe_peak_tflops,
                                double cluster_tflops) {
  ComputePeak p;
  p.compute_dtype = compute_dtype;
  if (device == Device::CPU) {
    kernels::cpu::check_compiled_isa();
    const auto& f = kernels::cpu::cpu_features();
    std::ostringstream cpu;
    cpu << (f.model_name.empty() ? f.vendor : f.model_name) << " (family " << f.family << " model "
        << f.model << ")";
    p.cpu = cpu.str();
    p.isa = f.isa_list();
    p.gemm_path = kernels::cpu::gemm_path();
    p.gemm_flops = planning::measure_cpu_gemm_flops(compute_dtype);
    if (compute_dtype != DType::F32 && !kernels::cpu::native_bf16_gemm())
      p.note = "note: " + std::string(dtype_name(compute_dtype)) +
               " runs widened to fp32 on this CPU (" +
               (compute_dtype == DType::BF16 ? "no AVX-512 BF16/AMX GEMM kernel"
                                             : "no fp16 GEMM kernel") +
               "): about fp32 speed or a little below, with half the activation memory";
  }
  if (recipe_peak_tflops > 0) {
    p.peak_flops = recipe_peak_tflops * 1e12;
    p.peak_source = "recipe training.peak_tflops";
  } else if (device != Device::CPU) {
    p.peak_flops = cluster_tflops * 1e12;
    p.peak_source = "cluster.gpu_tflops";
  } else {
    const kernels::cpu::PeakFlops hw = planning::measure_cpu_peak(compute_dtype);
    p.peak_flops = hw.flops;
    p.peak_isa = hw.isa;
    p.peak_source = kMeasuredSource;
  }
  return p;
}

bool ComputePeak::remeasure_if_exceeded(double achieved_flops) {
  constexpr int kMaxRemeasures = 3;
  if (peak_source != kMeasuredSource || achieved_flops <= peak_flops ||
      remeasured >= kMaxRemeasures)
    return false;
  ++remeasured;
  peak_flops = std::max(peak_flops, planning::measure_cpu_peak(compute_dtype).flops);
  gemm_flops = std::max(gemm_flops, planning::measure_cpu_gemm_flops(compute_dtype));
  return true;
}

bool ComputePeak::remeasure_gemm_if_exceeded(double achieved_flops) {
  constexpr int kMaxRemeasures = 3;
  if (gemm_flops <= 0 || achieved_flops <= gemm_flops || gemm_remeasured >= kMaxRemeasures)
    return false;
  ++gemm_remeasured;
  gemm_flops = std::max(gemm_flops, planning::measure_cpu_gemm_flops(compute_dtype));
  return true;
}

std::string ComputePeak::describe(int threads) const {
  std::ostringstream s;
  s.precision(4);
  if (!cpu.empty())
    s << "cpu: " << cpu << ", isa " << isa << "; " << threads << " threads per rank\n"
      << "gemm: " << gemm_path << "\n";
  s << "peak: " << peak_flops / 1e12 << " TFLOP/s per rank (" << peak_source
    << (peak_isa.empty() ? "" : ", " + peak_isa) << ")";
  if (gemm_flops > 0) s << "; measured gemm " << gemm_flops / 1e12 << " TFLOP/s";
  if (!note.empty()) s << "\n" << note;
  s << "\nMFU = model FLOP/s (Megatron's formula) / peak; \"of gemm\" = the same over the measured "
       "gemm rate\n";
  return s.str();
}

nlohmann::json ComputePeak::to_json() const {
  nlohmann::json j = {{"peak_flops", peak_flops}, {"peak_source", peak_source}};
  if (!peak_isa.empty()) j["peak_isa"] = peak_isa;
  if (!cpu.empty()) {
    j["cpu"] = cpu;
    j["isa"] = isa;
    j["gemm"] = gemm_path;
    j["gemm_flops"] = gemm_flops;
  }
  return j;
}

}  // namespace megatron::training
