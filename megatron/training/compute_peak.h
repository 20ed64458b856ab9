#pragma once
// What the run's MFU is measured against, decided once at start and reported on stdout and as the
// first JSONL line: on the CPU, the processor, its usable instruction sets, the GEMM path in use,
// the hardware peak for the compute dtype (register-only loops, or training.peak_tflops) and the
// rate a large GEMM reaches through that path; on a GPU, the recipe's peak.
#include <nlohmann/json.hpp>
#include <string>

#include "megatron/core/dtype.h"
#include "megatron/core/tensor.h"

namespace megatron::training {

struct ComputePeak {
  double peak_flops = 0;    // per rank; 0 = unknown (MFU not reported)
  std::string peak_source;  // "recipe", "cluster.gpu_tflops", "measured"
  std::string peak_isa;     // CPU: the instructions that reached the peak
  double gemm_flops = 0;    // CPU: measured GEMM rate through the GEMM path (0 on a GPU)
  std::string cpu, isa, gemm_path;
  std::string note;  // a caveat for the log (e.g. bf16 without bf16 instructions)
  DType compute_dtype = DType::F32;
  int remeasured = 0;  // times a step outran the measured peak and it was measured again

  // recipe_peak_tflops > 0 wins; on a GPU cluster_tflops; on the CPU measured for compute_dtype.
  static ComputePeak decide(Device device, DType compute_dtype, double recipe_peak_tflops,
                            double cluster_tflops);
  // A step cannot beat the hardware: when achieved_flops (per rank) exceeds a measured CPU
  // peak, the start's measurement was disturbed (e.g. by another process on the cores), so the
  // peak and the GEMM rate are measured again, each keeping the larger value. Returns whether
  // it measured (at most a few times per run).
  bool remeasure_if_exceeded(double achieved_flops);
  // The same for the GEMM rate ("of gemm"): a step above it means the start-up probe read low
  // (disturbed) or the step's GEMM shapes run faster than the probe's; measured again (best of
  // several, kept if larger) a few times per run. Returns whether it measured.
  bool remeasure_gemm_if_exceeded(double achieved_flops);
  int gemm_remeasured = 0;
  std::string describe(int threads) const;  // one line for the startup log
  nlohmann::json to_json() const;           // the JSONL "start" record's fields
};

}  // namespace megatron::training
